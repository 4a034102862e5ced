"""Searches while a large partition's graph is rebuilt (bench.scale `--rebuild`).

A partition's HNSW graph cannot drop vectors: removals are tombstones, and past a quarter of the
graph the tier rebuilds it from the live vectors (tiers/semantic/vector_index.py), in its
idle-priority rebuild thread, while the old graph keeps serving. At 1M entries that rebuild is
minutes of one core, so this is where a pause would show. The run removes just enough entries
to pass the quarter, then searches the partition, one query every `pace_s`, until the new graph
is swapped in, and stores a few entries meanwhile (they are applied to the new graph when it is
swapped in). It reports the searches' p50/p99/max during the rebuild against the same searches
on the settled graph just before, and checks afterwards that no removed entry is found and
that every entry stored meanwhile is.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from bench.scale_tier import ANALYSIS, Layout, entry, index_of, nearest_number, percentiles
from tiers.semantic.tier import SemanticTier


async def search_times(
    tier: SemanticTier, partition: str, queries: np.ndarray, count: int, pace_s: float
) -> list[float]:
    times: list[float] = []
    for n in range(count):
        started = time.perf_counter()
        await tier.search(partition, queries[n % len(queries)], ANALYSIS)
        times.append(time.perf_counter() - started)
        await asyncio.sleep(pace_s)
    return times


async def searches_during_rebuild(
    tier: SemanticTier,
    layout: Layout,
    vectors: np.ndarray,
    queries: np.ndarray,
    pace_s: float = 0.01,
) -> dict[str, Any]:
    assert layout.partitions == 1, "one partition: the graph that is rebuilt"
    partition = layout.partition(0)
    index = index_of(tier, partition)
    assert index.is_hnsw, "a graph to rebuild"
    settled = await search_times(tier, partition, queries, len(queries), pace_s)
    # The last entries go: a quarter of the graph and a few more, the tier's threshold.
    doomed = range(layout.entries - (layout.entries // 4 + 32), layout.entries)
    began = time.perf_counter()
    for n in doomed:
        await tier.remove(f"{layout.tag(n)}-e{n}")
    removed_s = time.perf_counter() - began
    during: list[float] = []
    added: list[int] = []
    slow: list[tuple[float, float]] = []  # (seconds into the rebuild, ms) past 50 ms
    while tier._rebuilding:
        n = len(during)
        started = time.perf_counter()
        await tier.search(partition, queries[n % len(queries)], ANALYSIS)
        during.append(time.perf_counter() - started)
        if during[-1] > 0.05:
            slow.append((round(started - began, 2), round(1000 * during[-1], 1)))
        if n % 100 == 0 and len(added) < 100:  # a store now and then, on the old graph
            number = doomed[len(added)]  # a removed entry's vector, under a new id
            added.append(number)
            await tier.add(entry(layout, number + layout.entries, vectors[number], vectors[number]))
        await asyncio.sleep(pace_s)
    rebuild_s = time.perf_counter() - began
    index = index_of(tier, partition)
    found_removed = sum(
        nearest_number(tier, partition, vectors[n]) == n
        for n in doomed[len(added) : len(added) + 200]
    )
    found_added = sum(
        nearest_number(tier, partition, vectors[n]) == n + layout.entries for n in added
    )
    return {
        "removed": len(doomed),
        "removed_s": removed_s,
        "rebuild_s": rebuild_s,
        "searches_during": len(during),
        "settled": percentiles(settled),
        # A small graph may be rebuilt before the first search: nothing to time then.
        "during": percentiles(during) | {"max_ms": 1000 * max(during)}
        if during
        else {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0},
        "slow_searches": slow[:50],
        "stored_during": len(added),
        "stored_during_found_after": found_added,
        "removed_found_after": found_removed,
        "graph_after": index.is_hnsw,
        "entries_after": len(index),
    }
