"""HNSW recall against search time in one large partition: the numbers behind the defaults
`semantic.hnsw_m`, `semantic.hnsw_ef_search` and `semantic.hnsw_ef_construction`.

The vectors and queries are bench.scale's (real MiniLM vectors of real questions, extended by
mixtures: bench/scale_data.py), so a row here is the search half of a bench.scale row. One graph
is built per (M, efConstruction); each efSearch is then measured on it:

- recall@1: the graph's top-1 against exact search (what bench.scale reports);
- near-tie recall@1: the top-1 counted right when its cosine is within `--tie` of the exact
  top-1's. Past a few hundred thousand entries a query has several entries at nearly the same
  cosine; which of them comes first changes no answer the thresholds would give, so this says how
  much of the strict miss is such a tie;
- search p50/p99: one query at a time, k = the tier's candidates, one OpenMP thread (as the tier
  searches), FAISS alone (bench.scale adds the guards and the lookup around it).

    python -m bench.hnsw_tuning [--entries 1000000] [--m 32] [--ef-construction 40,80]
                                [--ef-search 64,96,128,192,256]

Prints a table and writes bench/results/hnsw-tuning.json. Builds use every core (the tier builds
with one, which changes the build time, not the graph's quality).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from bench.harness import print_table, write_json
from bench.scale import exact_nearest
from bench.scale_data import CACHE, DATA, extend, held_out, real_vectors
from bench.scale_tier import DIM, percentiles
from core.semantic_config import SemanticConfig

CANDIDATES = SemanticConfig().candidates  # k of the tier's search


def build(vectors: np.ndarray, m: int, ef_construction: int) -> tuple[faiss.IndexHNSWFlat, float]:
    graph = faiss.IndexHNSWFlat(DIM, m, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = ef_construction
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    started = time.perf_counter()
    graph.add(vectors)
    return graph, time.perf_counter() - started


def sweep(
    graph: faiss.IndexHNSWFlat,
    vectors: np.ndarray,
    queries: np.ndarray,
    truth: np.ndarray,
    ef_search: int,
    tie: float,
) -> dict[str, Any]:
    faiss.omp_set_num_threads(1)
    graph.hnsw.efSearch = ef_search
    times: list[float] = []
    got: list[int] = []
    for query in queries:
        row = query.reshape(1, DIM)
        started = time.perf_counter()
        _, ids = graph.search(row, CANDIDATES)
        times.append(time.perf_counter() - started)
        got.append(int(ids[0][0]))
    exact_cos = np.einsum("ij,ij->i", vectors[truth], queries)
    got_cos = np.einsum("ij,ij->i", vectors[np.array(got)], queries)
    return {
        "ef_search": ef_search,
        "recall_at_1": float(np.mean(np.array(got) == truth)),
        "near_tie_recall_at_1": float(np.mean(got_cos >= exact_cos - tie)),
        "worst_cosine_gap": float(np.max(exact_cos - got_cos)),
        **{f"search_{k}": v for k, v in percentiles(times).items()},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(11)  # bench.scale's seed: the same vectors and queries
    data = Path(args.data)
    real = real_vectors(args.real + args.queries, Path(args.cache), data)
    asked = held_out(len(real), args.queries, data)
    queries = np.ascontiguousarray(real[asked])
    pool = np.delete(real, asked, axis=0)
    vectors = np.ascontiguousarray(extend(pool, args.entries, rng))
    truth = exact_nearest(vectors, queries)
    out: dict[str, Any] = {"args": vars(args), "graphs": []}
    for m in [int(v) for v in args.m.split(",")]:
        for ef_construction in [int(v) for v in args.ef_construction.split(",")]:
            print(f"M {m}, efConstruction {ef_construction}: building ...", flush=True)
            graph, build_s = build(vectors, m, ef_construction)
            rows = [
                sweep(graph, vectors, queries, truth, int(ef), args.tie)
                for ef in args.ef_search.split(",")
            ]
            out["graphs"].append(
                {"m": m, "ef_construction": ef_construction, "build_s": build_s, "rows": rows}
            )
            del graph
    return out


def report(out: dict[str, Any]) -> None:
    args = out["args"]
    print_table(
        f"HNSW over {args['entries']:,} vectors in one partition, {args['queries']} real queries"
        f" (near tie: within {args['tie']} cosine of the exact top-1)",
        [
            "M",
            "efConstruction",
            "build s",
            "efSearch",
            "recall@1",
            "near-tie recall@1",
            "search p50 ms",
            "search p99 ms",
        ],
        [
            [
                g["m"],
                g["ef_construction"],
                g["build_s"],
                r["ef_search"],
                r["recall_at_1"],
                r["near_tie_recall_at_1"],
                r["search_p50_ms"],
                r["search_p99_ms"],
            ]
            for g in out["graphs"]
            for r in g["rows"]
        ],
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--m", default="32", help="graph degrees, comma-separated")
    parser.add_argument("--ef-construction", default="40,80", help="comma-separated")
    parser.add_argument("--ef-search", default="64,96,128,192,256", help="comma-separated")
    parser.add_argument("--queries", type=int, default=500, help="held-out real questions")
    parser.add_argument("--real", type=int, default=19_500, help="real vectors to index")
    parser.add_argument("--tie", type=float, default=1e-3, help="cosine of a near tie")
    parser.add_argument("--cache", default=str(CACHE), help="where the real vectors are cached")
    parser.add_argument("--data", default=str(DATA), help="the grouped question sets")
    parser.add_argument("--json", default="hnsw-tuning", help="bench/results/NAME.json")
    args = parser.parse_args(argv)
    out = run(args)
    report(out)
    print(f"\nwrote {write_json(args.json, out)}")
    return out


if __name__ == "__main__":
    main()
