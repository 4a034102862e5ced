"""bench.redis_search end to end at a tiny size, so that it cannot rot: a real semantic tier
and a real Redis Stack server with its search module (`make redis-stack`; `make test` installs
it), the made-up vectors of tests/integration/test_bench_scale.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import redis_search
from tests.integration.test_bench_scale import write_data, write_vectors
from tests.support.redis_stack import INSTALL_HINT, find_redis_stack

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(
        find_redis_stack() is None, reason=f"Redis Stack is not installed: {INSTALL_HINT}"
    ),
]


def test_the_redis_search_bench_measures_both_indexes_side_by_side(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    write_vectors(tmp_path / "cache")
    out = redis_search.main(
        [
            "--sizes=200",
            "--spread=10",
            "--queries=20",
            "--real=280",
            f"--cache={tmp_path / 'cache'}",
            f"--data={tmp_path / 'data'}",
            "--json=redis-search-test",
        ]
    )
    layouts = [(r["redis"]["entries"], r["redis"]["partitions"]) for r in out["runs"]]
    assert layouts == [(200, 1), (200, 10)]
    for run in out["runs"]:
        faiss, found = run["faiss"], run["redis"]
        # Redis indexed every record, and found each query's exact nearest at this size.
        assert found["indexed_docs"] == 200 and found["index_failures"] == 0
        assert found["recall_at_1"] == 1.0
        # The same judging over the same nearest candidates: the same hits, by search and lookup.
        assert 0 < found["hit_share"] == faiss["hit_share"] == found["lookup"]["hit_share"]
        assert found["knn_filtered"]["p99_ms"] >= found["knn_filtered"]["p50_ms"] > 0
        assert found["redis_bytes_per_entry_with_index"] > found["redis_bytes_per_entry_records"]
        assert found["restart"]["ready_s"] >= found["restart"]["rdb_loaded_s"] > 0
        assert found["restart_without_index_s"] > 0
    big = out["extrapolated_1m"]
    assert big["from_entries"] == 200
    assert big["lookup_p99_ratio"] == big["redis_lookup_p99_ms"] / big["faiss_lookup_p99_ms"]
    assert out["decision"]["wins"] == (
        big["lookup_p99_ratio"] <= 2 and out["decision"]["replica_holds_no_vectors"]
    )
