"""The event loop's longest pauses around one large partition a replica holds: its restore from
a snapshot, the first stores into it, a snapshot's copy of it; and how long the collector's
collections over what it holds take.

    python -m bench.loop_pauses [--entries 1000000]

Every request a replica serves waits while its event loop is held, exact hits included, so a
pause is measured as the longest gap between the turns of a task that asks to run every
millisecond, while each phase runs as the proxy runs it:

- restore: the snapshot read and restored in a worker thread, then installed on the loop
  (`SemanticTier.install`), after the collector has been settled as at the proxy's start
  (`settle_collector`: what exists is frozen out of full collections);
- first stores: `STORES` new entries into the restored partition, each timed;
- snapshot copy: `SemanticTier.images`, what the partition loader hands to the snapshot writer.

A flat index (no graph: a graph's build and room are bench.scale's and the tests'), random unit
vectors, entries as bench.scale's. Prints a table and writes bench/results/loop-pauses.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.harness import print_table, write_json
from bench.scale_data import unit_random
from bench.scale_tier import Layout, entry, fill, new_tier, write_snapshot
from core.semantic_config import SemanticConfig
from proxy.composition.lifecycle import settle_collector
from tiers.semantic.snapshot import SnapshotStore

STORES = 20
TICK_S = 0.001


@dataclass
class Phase:
    """The longest gap between the ticker's turns, and the collections, while a phase ran."""

    name: str
    longest_gap_s: float = 0.0
    collections_s: dict[int, list[float]] = field(default_factory=lambda: {0: [], 1: [], 2: []})


class LoopWatch:
    """A ticker on the loop and a timer on the collector, both reporting to the current phase."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []
        self._collection_began = 0.0
        self._last_tick = time.perf_counter()

    def phase(self, name: str) -> None:
        self.phases.append(Phase(name))
        self._last_tick = time.perf_counter()

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            if self.phases:
                gap = now - self._last_tick - TICK_S
                current = self.phases[-1]
                current.longest_gap_s = max(current.longest_gap_s, gap)
            self._last_tick = now

    def on_collection(self, stage: str, info: dict[str, int]) -> None:
        if stage == "start":
            self._collection_began = time.perf_counter()
        elif self.phases:
            took = time.perf_counter() - self._collection_began
            self.phases[-1].collections_s[info["generation"]].append(took)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    layout = Layout(args.entries, 1)
    vectors = unit_random(rng, args.entries + STORES)
    config = SemanticConfig(max_entries=10_000_000, flat_max_entries=10_000_000)
    tag = layout.tag(0)
    with tempfile.TemporaryDirectory() as folder:
        store = SnapshotStore(folder, config)
        held = new_tier(config)
        try:
            await fill(held, layout, vectors[: args.entries], vectors)
            await write_snapshot(store, held, tag)
        finally:
            await held.close()
        del held
        fresh = new_tier(config)
        watch = LoopWatch()
        thresholds = gc.get_threshold()
        settle_collector()  # as at the proxy's start
        gc.callbacks.append(watch.on_collection)
        ticker = asyncio.create_task(watch.tick())
        try:
            watch.phase("restore")
            began = time.perf_counter()
            snapshot = await asyncio.to_thread(store.read, tag)
            assert snapshot is not None
            for image in snapshot.images:
                first = fresh.reserve_ids(image.vectors())
                restored = await asyncio.to_thread(store.restore, image, first)
                await fresh.install(restored, set())
            restore_s = time.perf_counter() - began
            watch.phase("first stores")
            stores_s = []
            for i in range(STORES):
                n = args.entries + i
                began = time.perf_counter()
                await fresh.add(entry(layout, n, vectors[n], vectors[n]))
                stores_s.append(time.perf_counter() - began)
                await asyncio.sleep(2 * TICK_S)  # the ticker's turn: a store does not yield
            watch.phase("snapshot copy")
            began = time.perf_counter()
            copied = await fresh.images(tag)
            copy_s = time.perf_counter() - began
            assert copied is not None, "nothing drops the partition while it is copied"
            await asyncio.sleep(0.05)  # the ticker's last turn
        finally:
            ticker.cancel()
            gc.callbacks.remove(watch.on_collection)
            gc.unfreeze()
            gc.set_threshold(*thresholds)
            await fresh.close()
    return {
        "args": vars(args),
        "restore_s": restore_s,
        "first_store_ms": stores_s[0] * 1e3,
        "stores_after_max_ms": max(stores_s[1:]) * 1e3,
        "snapshot_copy_s": copy_s,
        "snapshot_entries": sum(len(image.records) for image in copied),
        "phases": [
            {
                "phase": p.name,
                "longest_pause_ms": p.longest_gap_s * 1e3,
                "collections": {g: len(t) for g, t in p.collections_s.items()},
                "longest_full_collection_ms": max(p.collections_s[2], default=0.0) * 1e3,
            }
            for p in watch.phases
        ],
    }


def report(out: dict[str, Any]) -> None:
    print_table(
        f"The event loop around one partition of {out['args']['entries']:,} entries (flat index)",
        ["phase", "longest pause ms", "collections gen 0/1/2", "longest full collection ms"],
        [
            [
                p["phase"],
                p["longest_pause_ms"],
                "/".join(str(p["collections"][g]) for g in (0, 1, 2)),
                p["longest_full_collection_ms"],
            ]
            for p in out["phases"]
        ],
    )
    print(
        f"restore {out['restore_s']:.1f} s; first store {out['first_store_ms']:.1f} ms, next"
        f" {STORES - 1} at most {out['stores_after_max_ms']:.1f} ms; snapshot copy"
        f" {out['snapshot_copy_s']:.2f} s ({out['snapshot_entries']:,} entries)"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=1_000_000, help="in the one partition")
    parser.add_argument("--json", default="loop-pauses", help="bench/results/NAME.json")
    args = parser.parse_args(argv)
    out = asyncio.run(run(args))
    report(out)
    print(f"\nwrote {write_json(args.json, out)}")
    return out


if __name__ == "__main__":
    main()
