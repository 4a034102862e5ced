"""A vector index inside Redis (Redis Stack's search module) beside the replica's own FAISS
index, measured in one run: lookup latency, memory, restart time (docs/redis-search.md).

The data and queries are bench.scale's (bench/scale_data.py: real MiniLM vectors of real
questions, extended by mixtures; held-out real questions with a paraphrase among the entries),
in the same layouts: N entries in one partition, and spread over `--spread` partitions. Per
size and layout, on one Redis Stack server (`make redis-stack`):

- FAISS: bench.scale's own measurement (`bench.scale.measure`: a real SemanticTier, HNSW past
  `semantic.flat_max_entries`, the search, `CacheService.lookup` over this Redis, RSS per entry,
  restart from a snapshot);
- Redis: the same entries stored through the real Redis tier and indexed by Redis in place
  (HNSW over the records' own vector field, M and EF_RUNTIME the tier's; a tag field for the
  partition), then KNN alone with and without the partition filter, the search with the same
  judging, the lookup, memory, and a restart from the RDB (bench/redis_search_run.py).

    python -m bench.redis_search [--sizes 10000,100000] [--spread 1000] [--queries 500]

(`--spread 0`: the one-partition layout only.)

Prints a table and writes bench/results/redis-search.json. A size not run (1M: FAISS's graph
alone takes about 14 minutes here, Redis's about as long again, twice with its restart) is
extrapolated from the largest run, labelled as such, and the issue's rule applied to it: the
Redis index wins where, at 1M entries, its lookup p99 is within 2× FAISS's while a replica
holds no vectors.
"""

from __future__ import annotations

import argparse
import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np

from bench import scale
from bench.harness import print_table, write_json
from bench.redis_search_run import STORES_WITH_INDEX, SearchBench
from bench.redis_search_run import measure as measure_redis
from bench.scale_data import CACHE, DATA, extend, held_out, real_vectors
from bench.scale_tier import Layout
from core.semantic_config import SemanticConfig
from tests.support.redis_stack import INSTALL_HINT, find_redis_stack, redis_stack_server

TARGET = 1_000_000
# The rule: Redis's lookup p99 at most this many times FAISS's, at TARGET entries.
WITHIN = 2.0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    stack = find_redis_stack()
    assert stack is not None, f"Redis Stack is not installed: {INSTALL_HINT}"
    rng = np.random.default_rng(11)  # bench.scale's: the same vectors and queries
    data = Path(args.data)
    real = real_vectors(args.real + args.queries, Path(args.cache), data)
    asked = held_out(len(real), args.queries, data)
    queries = real[asked]
    pool = np.delete(real, asked, axis=0)
    sizes = [int(s) for s in args.sizes.split(",")]
    vectors = extend(pool, max(sizes) + STORES_WITH_INDEX, rng)
    config = SemanticConfig(max_entries=10_000_000)
    out: dict[str, Any] = {"args": vars(args), "real_vectors": len(pool), "runs": []}
    # A restart re-indexes every record before Redis answers: minutes at 100,000 entries, tens
    # of minutes at 1M; the ceiling only has to catch a server that never comes back.
    with redis_stack_server(stack, start_timeout_s=7_200) as server:
        for size in sizes:
            nearest = scale.exact_nearest(vectors[:size], queries)
            for partitions in (1, args.spread) if args.spread > 1 else (1,):
                layout = Layout(size, min(partitions, size))
                print(f"{size:,} entries over {layout.partitions:,} partitions ...", flush=True)
                faiss = await scale.measure(config, layout, vectors[:size], queries, server.url)
                # Kept at once: Redis's half of a 1M run takes as long again.
                write_json(f"{args.json}-faiss", {"args": vars(args), "faiss": faiss})
                async with SearchBench(server, config) as bench:
                    found = await measure_redis(bench, layout, vectors, queries, nearest)
                out["runs"].append({"faiss": faiss, "redis": found})
    return out


def extrapolated(runs: list[dict[str, Any]], target: int) -> dict[str, Any]:
    """`target` entries in one partition from the largest one-partition run, by bench.scale's
    rule for both: latencies × log(target)/log(n) (an HNSW search visits about efSearch · log n
    nodes), memory per entry as measured (it does not depend on n), builds and restarts ×
    target/n · log(target)/log(n) for Redis's graph (each insertion is a search), × target/n
    for FAISS's snapshot restore (linear)."""
    one = max(
        (r for r in runs if r["redis"]["partitions"] == 1), key=lambda r: r["redis"]["entries"]
    )
    faiss, found = one["faiss"], one["redis"]
    n = found["entries"]
    grow = math.log(target) / math.log(n)
    faiss_p99 = faiss["lookup"]["p99_ms"] * grow
    redis_p99 = found["lookup"]["p99_ms"] * grow
    return {
        "from_entries": n,
        "latency_factor": grow,
        "faiss_lookup_p99_ms": faiss_p99,
        "redis_lookup_p99_ms": redis_p99,
        "lookup_p99_ratio": redis_p99 / faiss_p99,
        "faiss_search_p99_ms": faiss["search"]["p99_ms"] * grow,
        "redis_search_p99_ms": found["search"]["p99_ms"] * grow,
        "faiss_replica_gb": faiss["rss_bytes_per_entry"] * target / 1e9,
        "redis_replica_gb": max(0.0, found["replica_rss_bytes_per_entry"]) * target / 1e9,
        "redis_server_gb": found["redis_bytes_per_entry_with_index"] * target / 1e9,
        "faiss_restart_s": faiss["restart"]["ready_s"] * target / n,
        "redis_build_s": found["build_s"] * target / n * grow,
        "redis_restart_s": found["restart"]["ready_s"] * target / n * grow,
    }


def decision(big: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's rule, on the 1M numbers (extrapolated where not run)."""
    latency = big["lookup_p99_ratio"] <= WITHIN
    no_vectors = all(r["redis"]["replica_rss_bytes_per_entry"] < 384 * 4 for r in runs)
    return {
        "lookup_p99_within_2x": latency,
        "replica_holds_no_vectors": no_vectors,
        "wins": latency and no_vectors,
    }


def report(out: dict[str, Any]) -> None:
    rows = []
    for r in out["runs"]:
        f, s = r["faiss"], r["redis"]
        layout = [f"{s['entries']:,}", f"{s['partitions']:,}"]
        rows.append([*layout, "FAISS " + f["index"], "-", f["search"]["p50_ms"],
                     f["search"]["p99_ms"], f["lookup"]["p50_ms"], f["lookup"]["p99_ms"],
                     f["recall_at_1"], f["rss_bytes_per_entry"], "-", f["build_s"],
                     f["restart"]["ready_s"]])  # fmt: skip
        rows.append([*layout, "Redis HNSW",
                     f"{s['knn_filtered']['p50_ms']:.2f} / {s['knn_filtered']['p99_ms']:.2f}",
                     s["search"]["p50_ms"], s["search"]["p99_ms"], s["lookup"]["p50_ms"],
                     s["lookup"]["p99_ms"], s["recall_at_1"], s["replica_rss_bytes_per_entry"],
                     s["redis_bytes_per_entry_with_index"], s["build_s"],
                     s["restart"]["ready_s"]])  # fmt: skip
    print_table(
        f"FAISS in the replica beside Redis's own index ({out['real_vectors']:,} real MiniLM"
        f" vectors, the rest mixtures; {out['args']['queries']} held-out real questions)",
        [
            "entries",
            "partitions",
            "index",
            "KNN p50/p99 ms",
            "search p50 ms",
            "search p99 ms",
            "lookup p50 ms",
            "lookup p99 ms",
            "recall@1",
            "replica B/entry",
            "Redis B/entry",
            "build s",
            "restart s",
        ],
        rows,
    )
    print_table(
        "Redis: KNN without the filter, stores, memory",
        ["entries", "partitions", "unfiltered p50/p99 ms", "stores/s (with index)",
         "records B/entry", "index B/entry", "vector index B/entry", "restart s (without index)"],
        [[f"{s['entries']:,}", f"{s['partitions']:,}",
          f"{s['knn_unfiltered']['p50_ms']:.2f} / {s['knn_unfiltered']['p99_ms']:.2f}",
          f"{s['stores_per_s_without_index']:.0f} ({s['stores_per_s_with_index']:.0f})",
          s["redis_bytes_per_entry_records"], s["index_bytes_per_entry"],
          s["vector_index_bytes_per_entry"],
          f"{s['restart']['rdb_loaded_s']:.1f} ({s['restart_without_index_s']:.1f})"]
         for s in (r["redis"] for r in out["runs"])],
    )  # fmt: skip
    big, verdict = out.get("extrapolated_1m"), out["decision"]
    if big is not None:
        print_table(
            f"1M entries in one partition: EXTRAPOLATED from {big['from_entries']:,} (not run)",
            ["FAISS lookup p99 ms", "Redis lookup p99 ms", "ratio", "FAISS replica GB",
             "Redis server GB", "FAISS restart s", "Redis restart s"],
            [[big["faiss_lookup_p99_ms"], big["redis_lookup_p99_ms"], big["lookup_p99_ratio"],
              big["faiss_replica_gb"], big["redis_server_gb"], big["faiss_restart_s"],
              big["redis_restart_s"]]],
        )  # fmt: skip
    print(f"\ndecision (lookup p99 within {WITHIN:g}x FAISS's at 1M, no vectors in a replica):"
          f" {'redis-search wins' if verdict['wins'] else 'FAISS stays'} {verdict}")  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000", help="entries, comma-separated")
    parser.add_argument(
        "--spread", type=int, default=1_000, help="partitions of the spread run (0: none)"
    )
    parser.add_argument("--queries", type=int, default=500, help="held-out real questions")
    parser.add_argument("--real", type=int, default=19_500, help="real vectors to index")
    parser.add_argument("--cache", default=str(CACHE), help="where the real vectors are cached")
    parser.add_argument("--data", default=str(DATA), help="the grouped question sets")
    parser.add_argument("--json", default="redis-search", help="bench/results/NAME.json")
    args = parser.parse_args(argv)
    out = asyncio.run(run(args))
    largest = max(r["redis"]["entries"] for r in out["runs"])
    if largest < TARGET:
        out["extrapolated_1m"] = extrapolated(out["runs"], TARGET)
        out["decision"] = decision(out["extrapolated_1m"], out["runs"])
    else:
        measured = next(r for r in out["runs"] if r["redis"]["entries"] >= TARGET)
        ratio = measured["redis"]["lookup"]["p99_ms"] / measured["faiss"]["lookup"]["p99_ms"]
        out["decision"] = decision({"lookup_p99_ratio": ratio}, out["runs"])
    report(out)
    path = write_json(args.json, out)
    print(f"\nwrote {path}")
    return out


if __name__ == "__main__":
    main()
