"""bench.loop_pauses end to end at a tiny size, so that it cannot rot: a real semantic tier, a
real snapshot in a temporary folder, the proxy's own collector settings. Run as it is run, in a
process of its own: it freezes and unfreezes the collector, which the test process shares with
every other test."""

from __future__ import annotations

import json
import subprocess
import sys

from bench import loop_pauses
from bench.harness import RESULTS, ROOT


def test_the_loop_pause_bench_measures_every_phase() -> None:
    subprocess.run(
        [sys.executable, "-m", "bench.loop_pauses", "--entries=3000", "--json=loop-pauses-test"],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    out = json.loads((RESULTS / "loop-pauses-test.json").read_text())
    assert [p["phase"] for p in out["phases"]] == ["restore", "first stores", "snapshot copy"]
    assert all(p["longest_pause_ms"] >= 0 for p in out["phases"])
    # Every entry and every store comes back in the copy a snapshot would write.
    assert out["snapshot_entries"] == 3000 + loop_pauses.STORES
    assert out["first_store_ms"] > 0 and out["stores_after_max_ms"] > 0
