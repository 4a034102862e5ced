"""bench.loop_pauses end to end at a tiny size, so that it cannot rot: a real semantic tier, a
real snapshot in a temporary folder, the proxy's own collector settings."""

from __future__ import annotations

import gc

from bench import loop_pauses


def test_the_loop_pause_bench_measures_every_phase() -> None:
    frozen, thresholds = gc.get_freeze_count(), gc.get_threshold()
    out = loop_pauses.main(["--entries=3000", "--json=loop-pauses-test"])
    assert [p["phase"] for p in out["phases"]] == ["restore", "first stores", "snapshot copy"]
    assert all(p["longest_pause_ms"] >= 0 for p in out["phases"])
    # Every entry and every store comes back in the copy a snapshot would write.
    assert out["snapshot_entries"] == 3000 + loop_pauses.STORES
    assert out["first_store_ms"] > 0 and out["stores_after_max_ms"] > 0
    assert (gc.get_freeze_count(), gc.get_threshold()) == (frozen, thresholds), "as found"
