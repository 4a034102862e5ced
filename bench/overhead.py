"""Proxy overhead: a bare aiohttp server vs Deja serving LRU-K hits, Redis hits and misses.

Everything under test runs on core 0; wrk runs on core 1 (taskset), one thread, at each
concurrency. The bare server returns exactly the bytes of a Deja hit (its body and its headers),
so the difference is Deja's own work: parsing, keys, lookup, building the headers, the access
log. Misses go through to the stub
upstream (also on core 0). The semantic tier is off here: it only runs after exact keys miss
(`python -m bench.semantic_latency` measures it).

    python -m bench.overhead [--duration-s 4] [--concurrency 1,16,64] [--rounds 5]

The scenarios run in interleaved rounds and each ratio to bare is taken within a round, so a
change in the shared machine's load between scenarios does not read as overhead. Each run also
records the CPU time the server under test spent per request (/proc), which time stolen by
other tenants of a shared machine does not inflate: "× bare CPU" is the bare server's CPU per
request over the scenario's, the throughput ratio both would reach if both were CPU-bound.
Targets: LRU-K hits ≥ 50% of the bare server's requests/s; at concurrency 1, LRU-K hit p50 ≤
bare p50 + 1 ms.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness import (
    PYTHON,
    WrkResult,
    pinned,
    post_json,
    print_table,
    run_wrk,
    write_json,
    wrk_post_script,
)
from tests.support.processes import ServerProcess
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv

SERVER_CORE, WRK_CORE = 0, 1
REQUEST = {
    "model": "stub-model",
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    ports = {name: free_port() for name in ("bare", "stub", "lru", "redis_only")}
    redis = RedisServer(prefix=pinned(SERVER_CORE, []))
    procs: list[ServerProcess] = []
    try:
        redis.start()
        stub = ServerProcess("stub", pinned(SERVER_CORE, stub_argv(ports["stub"])), ports["stub"])
        procs.append(stub)
        stub.wait_ready("/v1/models", timeout_s=30)
        upstream = f"http://127.0.0.1:{ports['stub']}/v1"
        common = {"DEJA_SEMANTIC__ENABLED": "false", "DEJA_CACHE__TENANT_SECRET": "bench"}
        proxies: dict[str, ServerProcess] = {}
        for name, extra in (("lru", {}), ("redis_only", {"DEJA_LRU_K__ENABLED": "false"})):
            argv = [
                PYTHON,
                "-m",
                "proxy.cli",
                "serve",
                "--port",
                str(ports[name]),
                "--upstream",
                upstream,
                "--redis",
                redis.url,
            ]
            proxies[name] = ServerProcess(
                f"proxy-{name}", pinned(SERVER_CORE, argv), ports[name], env={**common, **extra}
            )
            procs.append(proxies[name])
        for proxy in proxies.values():
            proxy.wait_ready("/readyz", timeout_s=120)

        lru_url = f"http://127.0.0.1:{ports['lru']}/v1/chat/completions"
        redis_only_url = f"http://127.0.0.1:{ports['redis_only']}/v1/chat/completions"
        _, headers, _ = post_json(lru_url, REQUEST)
        assert headers["X-Deja-Cache"] == "miss", headers
        hit_body, hit_headers = _raw_post(lru_url, REQUEST)
        assert post_json(redis_only_url, REQUEST)[1]["X-Deja-Tier"] == "redis"

        body_file = Path(tempfile.mkstemp(suffix=".json")[1])
        body_file.write_bytes(hit_body)
        headers_file = Path(tempfile.mkstemp(suffix=".json")[1])
        headers_file.write_text(json.dumps(hit_headers))
        bare_argv = [PYTHON, "-m", "bench.bare_server", str(ports["bare"]), str(body_file)]
        bare = ServerProcess(
            "bare", pinned(SERVER_CORE, [*bare_argv, str(headers_file)]), ports["bare"]
        )
        procs.append(bare)
        bare.wait_ready("/healthz", timeout_s=120)

        fixed = wrk_post_script(json.dumps(REQUEST).encode())
        unique = dict(REQUEST, messages=[{"role": "user", "content": "Question number __N__?"}])
        misses = wrk_post_script(json.dumps(unique).encode(), unique_prompt=True)
        bare_url = f"http://127.0.0.1:{ports['bare']}/v1/chat/completions"
        lru_pid, redis_only_pid = proxies["lru"].proc.pid, proxies["redis_only"].proc.pid
        scenarios = [
            ("bare aiohttp", bare_url, fixed, bare.proc.pid),
            ("LRU-K hit", lru_url, fixed, lru_pid),
            ("Redis hit", redis_only_url, fixed, redis_only_pid),
            ("miss (stub upstream)", lru_url, misses, lru_pid),
        ]
        for _, url, script, _ in scenarios:
            run_wrk(url, script, 4, 1.0, WRK_CORE)  # warm-up
        # Rounds interleave the scenarios, so a change in the machine's load shows up in the
        # baseline of the same round too: each ratio to bare is taken within a round, and the
        # table reports the median over rounds (and their range).
        runs: dict[str, dict[int, list[WrkResult]]] = {
            name: {c: [] for c in levels} for name, _, _, _ in scenarios
        }
        for _ in range(args.rounds):
            for c in levels:
                for name, url, script, pid in scenarios:
                    result = run_wrk(url, script, c, args.duration_s, WRK_CORE, server_pid=pid)
                    runs[name][c].append(result)
    finally:
        for proc in reversed(procs):
            proc.stop()
        redis.close()
    report(runs, levels)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


# Headers every aiohttp response gets from aiohttp itself; the bare server adds its own.
_FRAMING_HEADERS = frozenset({"content-length", "date", "server", "connection"})


def _raw_post(url: str, payload: Any) -> tuple[bytes, dict[str, str]]:
    """A hit's body and the headers Deja chose for it."""
    import urllib.request

    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["X-Deja-Cache"] == "hit"
        headers = {
            name: value
            for name, value in response.headers.items()
            if name.lower() not in _FRAMING_HEADERS
        }
        return bytes(response.read()), headers


def report(runs: dict[str, dict[int, list[WrkResult]]], levels: list[int]) -> None:
    bare = runs["bare aiohttp"]
    rows, cells = [], {}
    for name, by_level in runs.items():
        for c in levels:
            rounds = by_level[c]
            ratios = [
                r.requests_per_s / b.requests_per_s for r, b in zip(rounds, bare[c], strict=True)
            ]
            cpu_ratios = [
                b.server_cpu_us_per_request / r.server_cpu_us_per_request
                for r, b in zip(rounds, bare[c], strict=True)
                if r.server_cpu_us_per_request and b.server_cpu_us_per_request
            ]
            cell = {
                "requests_per_s": _median([r.requests_per_s for r in rounds]),
                "p50_ms": _median([r.p50_ms for r in rounds]),
                "p99_ms": _median([r.p99_ms for r in rounds]),
                "ratio_to_bare": _median(ratios),
                "ratios_by_round": ratios,
                "server_cpu_us_per_request": _median(
                    [r.server_cpu_us_per_request or 0.0 for r in rounds]
                ),
                "cpu_ratio_to_bare": _median(cpu_ratios) if cpu_ratios else None,
                "errors": sum(r.errors for r in rounds),
                "generator_cpu_share": _median([r.generator_cpu_share for r in rounds]),
                "rounds": [asdict(r) for r in rounds],
            }
            cells[f"{name} @ {c}"] = cell
            rows.append(
                [
                    name,
                    c,
                    round(cell["requests_per_s"]),
                    cell["p50_ms"],
                    cell["p99_ms"],
                    cell["ratio_to_bare"],
                    f"{min(ratios):.2f}–{max(ratios):.2f}",
                    round(cell["server_cpu_us_per_request"]),
                    cell["cpu_ratio_to_bare"],
                    cell["errors"],
                    f"{cell['generator_cpu_share']:.0%}",
                ]
            )
    print_table(
        f"Proxy overhead (server on core 0, wrk on core 1; medians of {len(bare[levels[0]])} "
        "interleaved rounds)",
        [
            "scenario",
            "conns",
            "req/s",
            "p50 ms",
            "p99 ms",
            "× bare req/s",
            "× bare, range",
            "CPU µs/req",
            "× bare CPU",
            "errors",
            "wrk CPU",
        ],
        rows,
    )
    checks = {
        f"LRU-K hit req/s ≥ 0.5 × bare at {c} conns": cells[f"LRU-K hit @ {c}"]["ratio_to_bare"]
        >= 0.5
        for c in levels
    }
    if 1 in levels:
        checks["LRU-K hit p50 ≤ bare p50 + 1 ms at 1 conn"] = (
            cells["LRU-K hit @ 1"]["p50_ms"] <= cells["bare aiohttp @ 1"]["p50_ms"] + 1.0
        )
    for check, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {check}")
    path = write_json("overhead", {"cells": cells, "checks": checks})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
