"""bench.scale end to end at a tiny size, so that it cannot rot: a real semantic tier, a real
Redis, snapshots; only the vectors are made up (a cache file standing for the MiniLM ones, each
group of prompts near one centre, as paraphrases are) so that no model loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench import scale
from bench.scale_data import SOURCES, held_out

GROUPS, PER_GROUP = 100, 3


def write_data(folder: Path) -> None:
    folder.mkdir()
    lines = [
        json.dumps({"prompt": f"question {g} phrased way {k}", "group": f"g{g}"})
        for g in range(GROUPS)
        for k in range(PER_GROUP)
    ]
    (folder / SOURCES[0]).write_text("\n".join(lines) + "\n")
    for name in SOURCES[1:]:
        (folder / name).write_text("")


def write_vectors(folder: Path) -> None:
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((GROUPS, 384)).astype(np.float32)
    rows = np.repeat(centres, PER_GROUP, axis=0)
    rows += rng.standard_normal(rows.shape).astype(np.float32) * 0.2
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    folder.mkdir()
    np.save(folder / f"minilm-{len(rows)}.npy", rows)


def test_held_out_queries_each_have_a_paraphrase_left_in_the_pool(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    asked = held_out(GROUPS * PER_GROUP, 20, tmp_path / "data")
    assert len(asked) == len(set(asked.tolist())) == 20
    assert all(int(i) % PER_GROUP == PER_GROUP - 1 for i in asked)  # each group's last prompt


def test_the_scale_bench_runs_and_reports_every_measure(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    write_vectors(tmp_path / "cache")
    out = scale.main(
        [
            "--sizes=200",
            "--spread=10",
            "--queries=20",
            "--real=280",
            "--redis-entries=100",
            "--recall-entries=100",
            f"--cache={tmp_path / 'cache'}",
            f"--data={tmp_path / 'data'}",
            "--json=scale-test",
        ]
    )
    assert [(r["entries"], r["partitions"]) for r in out["runs"]] == [(200, 1), (200, 10)]
    for run in out["runs"]:
        assert run["index"] == "flat" and run["recall_at_1"] == 1.0  # flat search is exact
        # Queries whose paraphrase is among the first 200 entries hit, by search and lookup.
        assert 0 < run["hit_share"] == run["lookup"]["hit_share"]
        assert run["search"]["p99_ms"] >= run["search"]["p50_ms"] > 0
        assert run["rss_bytes_per_entry"] > 0 and run["restart"]["ready_s"] > 0
        assert run["restart"]["first_store_ms"] > 0 and run["restart"]["stores_after_max_ms"] > 0
    assert out["redis"]["record_bytes"] > 384 * 4  # the record holds the vector
    assert out["redis"]["per_s"] > 0
    assert set(out["extension_recall"]) == {"entries", "real", "mixtures", "random"}
    assert out["extrapolated_1m"]["restart_factor"] == 1_000_000 / 200


def test_a_graph_rebuilt_under_searches_keeps_what_was_stored_and_drops_what_was_removed(
    tmp_path: Path,
) -> None:
    """`--rebuild`: a quarter of a one-partition graph removed, the graph rebuilt while it is
    searched and stored to (bench/scale_rebuild.py); at 1M this is where a pause would show."""
    write_data(tmp_path / "data")
    write_vectors(tmp_path / "cache")
    out = scale.main(
        [
            "--sizes=400",
            "--layouts=one",
            "--flat-max=100",
            "--rebuild",
            "--queries=20",
            "--real=280",
            "--redis-entries=50",
            "--recall-entries=100",
            f"--cache={tmp_path / 'cache'}",
            f"--data={tmp_path / 'data'}",
            "--json=scale-test",
        ]
    )
    (run,) = out["runs"]
    assert run["index"] == "hnsw"
    rebuilt = run["during_rebuild"]
    assert rebuilt["removed"] == 400 // 4 + 32 and rebuilt["graph_after"]
    assert rebuilt["entries_after"] == 400 - rebuilt["removed"] + rebuilt["stored_during"]
    assert rebuilt["stored_during_found_after"] == rebuilt["stored_during"]
    assert rebuilt["removed_found_after"] == 0
    assert rebuilt["settled"]["p50_ms"] > 0
