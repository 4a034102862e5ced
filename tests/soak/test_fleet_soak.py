"""The fleet soak (bench/soak.py) as a test: three real `deja serve` processes with real models
on one Redis, and again on a six-node Redis Cluster, under steady mixed load with one proxy
restarted midway; every acceptance criterion of the soak holds.

Slow (minutes, three model loads): `make soak` runs it, `make test` does not. The duration is
`DEJA_SOAK_MINUTES` (10); each run writes bench/results/soak-<redis>.json and prints its table.
"""

from __future__ import annotations

import os

import pytest

from bench.soak import P99_RATIO, RSS_GROWTH, SEEN_S, run, table, write

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.models]

MINUTES = float(os.environ.get("DEJA_SOAK_MINUTES", "10"))


@pytest.mark.parametrize("backend", ["single", "cluster"])
def test_a_fleet_stays_flat_and_consistent_under_steady_load(backend: str) -> None:
    result = run(MINUTES, backend, rate=float(os.environ.get("DEJA_SOAK_RATE", "5")))
    write(result)
    print(table(result))
    assert result["error_count"] == 0, result["errors"]
    for rss in result["rss"]:
        if rss["judged"]:
            assert rss["growth"] <= RSS_GROWTH, rss
    assert any(rss["judged"] for rss in result["rss"]), result["rss"]
    first, last = result["first_minute_p99_ms"], result["last_minute_p99_ms"]
    assert last <= P99_RATIO * first, result["per_minute"]
    probes = result["probes"]
    assert probes["feedback"] > 0 and probes["invalidate"] > 0, probes
    assert not probes["errors"] and probes["max_seen_s"] <= SEEN_S, probes
    for partitions in result["partitions"]:
        assert partitions["asked"] > 0 and not partitions["not_held"], partitions
        assert partitions["agrees"], partitions  # within Redis's count at its sweep
    assert result["restart"], "no proxy was restarted"
    assert result["passed"], result["criteria"]
