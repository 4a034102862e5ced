"""The semantic tier at scale: 10k, 100k (and 1M) entries in one partition and spread over 1,000.

Vectors: real MiniLM embeddings of real questions, extended past the real ones by convex
mixtures of two real vectors plus a small perturbation (bench/scale_data.py gives the method);
`--queries` held-out real questions, each with a paraphrase among the indexed ones (its
group's other prompts: bench/scale_data.held_out), are the queries. Entries go into a real
SemanticTier (bench/scale_tier.py: one fixed analysis per entry; the guards run on every
candidate), which switches a partition from flat to HNSW past `semantic.flat_max_entries`.
Per size and layout:

- build: every entry added, and the index settled (HNSW built in the background);
- search p50/p99: `SemanticTier.search` (the index and the guards, no embedding), one query at a
  time; hits: the share answered;
- lookup p50/p99: `CacheService.lookup` over a real Redis (an exact-key miss, then the semantic
  search and the hit's record read), prompt features computed already; Redis holds the entries
  the queries hit (reading one record costs the same whatever Redis holds);
- recall@1: the index's top-1 against exact search. A query goes to the partition of its exact
  nearest neighbour among all entries (where its paraphrases are, as a tenant's are);
- the collector as the proxy sets it once started (`settle_collector`: what is held is frozen
  out of full collections); full collections during the searches and lookups are counted;
- bytes/entry: RSS growth per entry (after gc and malloc_trim) and beyond the vector's
  384 × 4 bytes; the tier's own estimate (`SemanticTier.entry_bytes`) next to it;
- restart: a snapshot of a partition written, then read, restored and installed into a fresh
  tier until a sampled entry hits (bench.restart measures the whole replica path, stream replay
  included, the same way; this is its snapshot part with real vectors); then the first
  `STORES_AFTER_RESTART` stores into the restored partition, each timed (a store adds to the
  index on the event loop: the first add to a restored graph used to move all its arrays);

Then Redis (bench/scale_redis.py): store throughput through `CacheService.store` and bytes per
entry, at `--redis-entries`; and the extension's effect on HNSW recall: one graph each over
real vectors, mixtures, and random unit vectors, of the same size.

    python -m bench.scale [--sizes 10000,100000] [--spread 1000] [--layouts one,spread]
                          [--queries 500] [--rebuild]

Prints tables and writes bench/results/scale.json. A size not run (1M: the HNSW build alone
takes about 14 minutes here) is extrapolated from the largest run, labelled as such.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import print_table, write_json
from bench.scale_data import CACHE, DATA, extend, held_out, real_vectors, unit_random
from bench.scale_rebuild import searches_during_rebuild
from bench.scale_redis import store_throughput
from bench.scale_tier import (
    ANALYSIS,
    DIM,
    FixedFeatures,
    Layout,
    entry,
    fill,
    index_of,
    nearest_number,
    new_tier,
    percentiles,
    request,
    rss_bytes,
    write_snapshot,
)
from core.clock import SystemClock
from core.config import RedisConfig
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig
from proxy.composition.lifecycle import settle_collector
from tests.support.redis_server import RedisServer
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.semantic.snapshot import SnapshotStore
from tiers.semantic.tier import SemanticTier
from tiers.semantic.vector_index import GraphShape, VectorIndex
from tiers.service import CacheService

VECTOR_BYTES = DIM * 4
# Stores timed after a partition is restored from its snapshot.
STORES_AFTER_RESTART = 20


def exact_nearest(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Each query's exact nearest entry number (inner product of unit vectors)."""
    best = np.full(len(queries), -np.inf, dtype=np.float32)
    where = np.zeros(len(queries), dtype=np.int64)
    for start in range(0, len(vectors), 100_000):
        sims = vectors[start : start + 100_000] @ queries.T
        top = sims.argmax(axis=0)
        value = sims[top, np.arange(len(queries))]
        better = value > best
        best[better], where[better] = value[better], top[better] + start
    return where


async def measure(
    config: SemanticConfig,
    layout: Layout,
    vectors: np.ndarray,
    queries: np.ndarray,
    url: str,
    rebuild: bool = False,
) -> dict[str, Any]:
    before = rss_bytes()
    tier = new_tier(config)
    began = time.perf_counter()
    await fill(tier, layout, vectors, vectors)
    build_s = time.perf_counter() - began
    grown = rss_bytes() - before
    # The proxy's collector once it has started (proxy/composition/lifecycle.py): what is held
    # so far frozen out of full collections, a larger young generation.
    settle_collector()
    full_collections = gc.get_stats()[2]["collections"]
    nearest = exact_nearest(vectors[: layout.entries], queries)
    try:
        searches, hits, found = [], 0, []
        right = 0
        for q, vector in enumerate(queries):
            partition = layout.partition(int(nearest[q]))
            top = nearest_number(tier, partition, vector)
            truth = int(nearest[q])
            right += top == truth or (
                top is not None
                and math.isclose(  # a tie, within float32's precision
                    float(vectors[top] @ vector), float(vectors[truth] @ vector), abs_tol=1e-6
                )
            )
            t = time.perf_counter()
            candidates = await tier.search(partition, vector, ANALYSIS)
            searches.append(time.perf_counter() - t)
            hits += bool(candidates)
            found += [c.entry_id for c in candidates]
        lookups = await lookup_times(tier, layout, vectors, queries, nearest, found, url)
        restart = await restart_time(config, tier, layout, vectors)
        graph = any(index_of(tier, layout.partition(int(n))).is_hnsw for n in nearest[:1])
        during_rebuild = (
            await searches_during_rebuild(tier, layout, vectors, queries)
            if rebuild and graph and layout.partitions == 1
            else None
        )
    finally:
        full_collections = gc.get_stats()[2]["collections"] - full_collections
        gc.unfreeze()
        await tier.close()
    return {
        "entries": layout.entries,
        "partitions": layout.partitions,
        "index": "hnsw" if graph else "flat",
        "build_s": build_s,
        "search": percentiles(searches),
        "lookup": lookups,
        "hit_share": hits / len(queries),
        "recall_at_1": right / len(queries),
        "rss_bytes_per_entry": grown / layout.entries,
        "rss_bytes_beyond_vector": grown / layout.entries - VECTOR_BYTES,
        "estimated_bytes_per_entry": tier.entry_bytes(),
        "restart": restart,
        "full_collections": full_collections,
        "during_rebuild": during_rebuild,
    }


async def lookup_times(
    tier: SemanticTier,
    layout: Layout,
    vectors: np.ndarray,
    queries: np.ndarray,
    nearest: np.ndarray,
    found: list[str],
    url: str,
) -> dict[str, float]:
    config = RedisConfig(url=url)
    connection = RedisConnection(config)
    await connection.start()
    store = RedisTier(connection, config)
    service = CacheService([store], SystemClock(), CacheRecorder(), tier)
    try:
        for entry_id in set(found):
            n = int(entry_id.rsplit("-e", 1)[1])
            await store.put(entry(layout, n, vectors[n], vectors[n]))
        times, hits = [], 0
        for q, vector in enumerate(queries):
            partition = layout.partition(int(nearest[q]))
            t = time.perf_counter()
            outcome = await service.lookup(request(layout, partition, q), FixedFeatures(vector))
            times.append(time.perf_counter() - t)
            hits += outcome.hit is not None
    finally:
        await connection.close()
    return percentiles(times) | {"hit_share": hits / len(queries)}


async def restart_time(
    config: SemanticConfig, tier: SemanticTier, layout: Layout, vectors: np.ndarray
) -> dict[str, float]:
    """A partition's snapshot written; then read, restored, installed in a fresh tier until a
    sampled entry of it hits."""
    tag = layout.tag(0)
    with tempfile.TemporaryDirectory() as folder:
        store = SnapshotStore(folder, config)
        began = time.perf_counter()
        written = await write_snapshot(store, tier, tag)
        write_s = time.perf_counter() - began
        fresh = new_tier(config)
        try:
            began = time.perf_counter()
            snapshot = store.read(tag)
            assert snapshot is not None
            for image in snapshot.images:
                restored = store.restore(image, fresh.reserve_ids(image.vectors()))
                await fresh.install(restored, set())
            probe = vectors[layout.partitions * 7 % layout.entries]
            assert await fresh.search(layout.partition(0), probe, ANALYSIS), "no hit restored"
            ready_s = time.perf_counter() - began
            stores_s = []
            for i in range(STORES_AFTER_RESTART):  # new entries, into partition 0 (tag(n) 0)
                n = layout.entries + i * layout.partitions
                began = time.perf_counter()
                await fresh.add(entry(layout, n, vectors[i], vectors[i]))
                stores_s.append(time.perf_counter() - began)
        finally:
            await fresh.close()
    return {
        "partition_entries": fresh.tag_size(tag),
        "snapshot_write_s": write_s,
        "snapshot_bytes": written.size_bytes,
        "ready_s": ready_s,
        "first_store_ms": stores_s[0] * 1e3,
        "stores_after_max_ms": max(stores_s[1:]) * 1e3,
    }


def graph_recall(config: SemanticConfig, vectors: np.ndarray, queries: np.ndarray) -> float:
    """recall@1 of an HNSW graph (the tier's M and efSearch) over `vectors`."""
    index = VectorIndex(DIM, 0, GraphShape.of(config))
    for n, vector in enumerate(vectors):
        index.add(n, vector)
    index.rebuild()
    truth = exact_nearest(vectors, queries)
    got = [index.search(q, 1)[0][0] for q in queries]
    return float(np.mean([g == t for g, t in zip(got, truth.tolist(), strict=True)]))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    data = Path(args.data)
    real = real_vectors(args.real + args.queries, Path(args.cache), data)
    asked = held_out(len(real), args.queries, data)
    queries = real[asked]
    pool = np.delete(real, asked, axis=0)
    sizes = [int(s) for s in args.sizes.split(",")]
    vectors = extend(pool, max([*sizes, args.redis_entries, args.recall_entries]), rng)
    config = SemanticConfig(max_entries=10_000_000, flat_max_entries=args.flat_max)
    out: dict[str, Any] = {"args": vars(args), "real_vectors": len(pool), "runs": []}
    with RedisServer() as redis:
        for size in sizes:
            for partitions in [{"one": 1, "spread": args.spread}[n] for n in args.layouts]:
                layout = Layout(size, min(partitions, size))
                print(f"{size:,} entries over {layout.partitions:,} partitions ...", flush=True)
                result = await measure(
                    config, layout, vectors[:size], queries, redis.url, args.rebuild
                )
                out["runs"].append(result)
        out["redis"] = await store_throughput(
            redis.url, Layout(args.redis_entries, args.spread), vectors
        )
    n = args.recall_entries
    small = queries[: min(200, len(queries))]
    random = unit_random(rng, n)
    out["extension_recall"] = {
        "entries": n,
        "real": graph_recall(config, pool[:n], small) if n <= len(pool) else None,
        "mixtures": graph_recall(config, extend(pool, len(pool) + n, rng)[len(pool) :], small),
        "random": graph_recall(config, random, unit_random(rng, len(small))),
    }
    return out


def extrapolated(runs: list[dict[str, Any]], target: int) -> dict[str, Any]:
    """`target` entries in one partition from the largest one-partition run: search and lookup
    × log(target)/log(n) (an HNSW search visits about efSearch · log n nodes), memory per entry
    as measured (it does not depend on n), restart × target/n (reading and installing a
    snapshot is linear)."""
    one = max((r for r in runs if r["partitions"] == 1), key=lambda r: r["entries"])
    n = one["entries"]
    grow = math.log(target) / math.log(n)
    return {
        "from_entries": n,
        "search_p99_ms": one["search"]["p99_ms"] * grow,
        "lookup_p99_ms": one["lookup"]["p99_ms"] * grow,
        "rss_bytes_beyond_vector": one["rss_bytes_beyond_vector"],
        "restart_ready_s": one["restart"]["ready_s"] * target / n,
        "search_factor": grow,
        "restart_factor": target / n,
    }


def report(out: dict[str, Any]) -> None:
    rows = [
        [
            f"{r['entries']:,}",
            f"{r['partitions']:,}",
            r["index"],
            r["search"]["p50_ms"],
            r["search"]["p99_ms"],
            r["lookup"]["p50_ms"],
            r["lookup"]["p99_ms"],
            r["hit_share"],
            r["recall_at_1"],
            r["rss_bytes_per_entry"],
            r["rss_bytes_beyond_vector"],
            r["estimated_bytes_per_entry"],
            r["build_s"],
            r["restart"]["ready_s"],
            f"{r['restart']['first_store_ms']:.1f} / {r['restart']['stores_after_max_ms']:.1f}",
            r["full_collections"],
        ]
        for r in out["runs"]
    ]
    print_table(
        f"Semantic tier at scale ({out['real_vectors']:,} real MiniLM vectors, the rest mixtures;"
        f" {out['args']['queries']} held-out real questions as queries)",
        [
            "entries",
            "partitions",
            "index",
            "search p50 ms",
            "search p99 ms",
            "lookup p50 ms",
            "lookup p99 ms",
            "hits",
            "recall@1",
            "RSS B/entry",
            "beyond vector",
            "estimate B",
            "build s",
            "restart s",
            "1st store / next max ms",
            "full GCs",
        ],
        rows,
    )
    redis = out["redis"]
    print_table(
        f"Redis: {redis['entries']:,} entries stored through CacheService.store",
        [
            "stores/s",
            "record B",
            "exact key B",
            "partition hash B",
            "B/entry",
            "used_memory B",
            "1M entries MB",
        ],
        [
            [
                redis["per_s"],
                redis["record_bytes"],
                redis["exact_index_bytes"],
                redis["partition_hash_bytes_per_entry"],
                redis["bytes_per_entry"],
                redis["used_memory_per_entry"],
                redis["bytes_per_entry"],
            ]
        ],
    )
    ext = out["extension_recall"]
    print_table(
        f"HNSW recall@1 over {ext['entries']:,} vectors of each kind (the tier's M, efSearch)",
        ["real", "mixtures", "random"],
        [[ext["real"], ext["mixtures"], ext["random"]]],
    )
    rebuilt = [r for r in out["runs"] if r.get("during_rebuild")]
    if rebuilt:
        print_table(
            "Searches while a one-partition graph is rebuilt (a quarter of it removed),"
            " against the settled graph just before",
            [
                "entries",
                "rebuild s",
                "searches",
                "settled p50 / p99 ms",
                "during p50 / p99 / max ms",
                "stored meanwhile, found after",
                "removed found after",
            ],
            [
                [
                    f"{r['entries']:,}",
                    d["rebuild_s"],
                    d["searches_during"],
                    f"{d['settled']['p50_ms']:.2f} / {d['settled']['p99_ms']:.2f}",
                    f"{d['during']['p50_ms']:.2f} / {d['during']['p99_ms']:.2f}"
                    f" / {d['during']['max_ms']:.1f}",
                    f"{d['stored_during']} / {d['stored_during_found_after']}",
                    d["removed_found_after"],
                ]
                for r in rebuilt
                for d in [r["during_rebuild"]]
            ],
        )
    big = out.get("extrapolated_1m")
    if big is None:
        return
    print_table(
        f"1M entries in one partition: EXTRAPOLATED from {big['from_entries']:,} (not run)",
        ["search p99 ms", "lookup p99 ms", "beyond vector B", "restart s"],
        [
            [
                big["search_p99_ms"],
                big["lookup_p99_ms"],
                big["rss_bytes_beyond_vector"],
                big["restart_ready_s"],
            ]
        ],
    )


def _layouts(value: str) -> list[str]:
    names = value.split(",")
    if not names or any(n not in ("one", "spread") for n in names):
        raise argparse.ArgumentTypeError(f"{value!r}: give one, spread or one,spread")
    return names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000", help="entries, comma-separated")
    parser.add_argument("--spread", type=int, default=1_000, help="partitions of the spread run")
    parser.add_argument(
        "--layouts",
        type=_layouts,
        default=["one", "spread"],
        help="one (every entry in one partition), spread (over --spread partitions), or both",
    )
    parser.add_argument("--queries", type=int, default=500, help="held-out real questions")
    parser.add_argument(
        "--flat-max",
        type=int,
        default=SemanticConfig().flat_max_entries,
        help="semantic.flat_max_entries: a partition past it is an HNSW graph",
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="then rebuild each one-partition graph and search it meanwhile (bench/scale_rebuild)",
    )
    parser.add_argument("--real", type=int, default=19_500, help="real vectors to index")
    parser.add_argument("--redis-entries", type=int, default=20_000)
    parser.add_argument("--recall-entries", type=int, default=10_000)
    parser.add_argument("--cache", default=str(CACHE), help="where the real vectors are cached")
    parser.add_argument("--data", default=str(DATA), help="the grouped question sets")
    parser.add_argument("--json", default="scale", help="bench/results/NAME.json")
    args = parser.parse_args(argv)
    out = asyncio.run(run(args))
    if all(r["entries"] < 1_000_000 for r in out["runs"]):
        out["extrapolated_1m"] = extrapolated(out["runs"], 1_000_000)
    report(out)
    path = write_json(args.json, out)
    print(f"\nwrote {path}")
    return out


if __name__ == "__main__":
    main()
