"""Deja's benchmarks, each run from the repository root as `python -m bench.NAME [--help]`.

Benchmarks: `overhead` (proxy overhead; `make bench`), `semantic_latency`, `quality`,
`calibration`, `faults` (an upstream outage), `modelserver`. Each prints a table and writes JSON
under bench/results/. The other modules are theirs: `harness` (cores, wrk, steal, tables, JSON),
`bare_server` (overhead's baseline), `quality_data`, `quality_metrics`, `quality_report`,
`calibration_upstream`, `calibration_report`. The processes a benchmark starts (the stub
upstream, Redis, the proxy) come from the tests' support package, `tests.support`, so the
benchmarks measure what the tests check.
"""
