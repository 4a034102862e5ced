"""Semantic-cache quality: Deja's hit rule against a bare threshold and GPTCache, on the dev data.

    .venv/bin/python -m bench.quality                       # everything, full data
    .venv/bin/python -m bench.quality --sets paws-wiki,mrpc --qqp-sample 5000
    .venv/bin/python -m bench.quality --skip qqp            # all but QQP (while iterating)

Pairs (QQP, PAWS-Wiki, MRPC) report precision, recall and false-positive rate (wrong hits /
non-duplicate pairs) of the full hit rule (cosine ≥ threshold and the meaning guards agree) at
a sweep of thresholds, with and without the guards, and GPTCache's `SearchDistanceEvaluation`
over the same MiniLM vectors and a FAISS store, swept over its thresholds (default 0.8).
Workloads (Banking77, CLINC150) are replayed in order against the nearest earlier prompts.
Each guard is also switched off alone at the shipped threshold, to show what it contributes.

Embeddings and parses are cached under bench/results/cache/ (first run: ~10 min of MiniLM and
~5 min of spaCy on two cores). Output: a table on stdout, bench/results/quality.json and
bench/results/quality.md. See docs/semantic-quality.md for the method and the numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import RESULTS
from bench.quality_data import (
    PAIR_SETS,
    WORKLOADS,
    EmbeddingCache,
    Pair,
    ParseCache,
    load_pairs,
    load_workload,
)
from bench.quality_metrics import (
    GptCacheScorer,
    Rates,
    best_recall_at_fpr,
    earlier_neighbours,
    label_ceiling,
    pair_cosines,
    pair_rates,
    replay_rates,
)
from bench.quality_report import render_markdown, targets
from core.semantic_config import SemanticConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.meaning.signature import Analysis
from normalize.runtime.sentence_encoder import load_sentence_encoder

SWEEP = tuple(round(0.70 + 0.01 * i, 2) for i in range(29))  # 0.70 … 0.98
GPTCACHE_SWEEP = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.925, 0.95, 0.96, 0.975, 0.985, 0.99)
MAX_FPR = 0.01
# Guard ablations at the shipped threshold: each switch off alone, and NER on.
ABLATIONS: dict[str, dict[str, bool | int]] = {
    "no negation guard": {"guard_negation": False},
    "no number guard": {"guard_numbers": False},
    "no entity guard": {"guard_entities": False},
    "no role guard": {"guard_roles": False},
    "any number of moved phrases": {"max_moved_phrases": 1000},
    "no antonym guard": {"guard_antonyms": False},
    "no question guard": {"guard_question": False},
    "spaCy NER on": {"spacy_ner": True},
}


class Bench:
    def __init__(self, config: SemanticConfig) -> None:
        self.config = config
        # MiniLM as the proxy's embedding workers load and call it, here in process.
        self.encoder = load_sentence_encoder(config)
        self.embeddings = EmbeddingCache("all-MiniLM-L6-v2")
        # One parse (with NER) serves every variant: NER does not change tags or the parse.
        self.parser = LemmaAnalyzer(replace(config, spacy_ner=True))
        self.analyzers = {False: LemmaAnalyzer(replace(config, spacy_ner=False)), True: self.parser}
        self.variants: dict[str, SemanticConfig] = {"shipped": config}
        for name, change in ABLATIONS.items():
            self.variants[name] = replace(config, **change)  # type: ignore[arg-type]

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        return self.embeddings.vectors(texts, self.encoder.encode)

    def analyses(self, name: str, texts: set[str]) -> dict[bool, dict[str, Analysis]]:
        """Analyses of `texts` without and with NER, from the cached parses of dataset `name`."""
        out: dict[bool, dict[str, Analysis]] = {False: {}, True: {}}
        cache = ParseCache(name, self.config.spacy_model)
        for text, doc in cache.docs(sorted(texts), self.parser.vocab, self.parser.parse_many):
            for ner, analyzer in self.analyzers.items():
                readable = analyzer.analysable(text)
                out[ner][text] = analyzer.analyze_doc(doc) if readable else analyzer.analyze(text)
        return out

    def verdicts(
        self, pairs: Sequence[tuple[str, str]], analyses: dict[bool, dict[str, Analysis]]
    ) -> dict[str, np.ndarray]:
        """Guard verdicts on (query, cached) pairs for every variant."""
        out = {}
        for name, cfg in self.variants.items():
            guard, table = MeaningGuard(cfg), analyses[cfg.spacy_ner]
            out[name] = np.array([guard.compare(table[a], table[b]).agree for a, b in pairs])
        return out


def run_pairs(bench: Bench, name: str, pairs: list[Pair], gpt: GptCacheScorer) -> dict[str, Any]:
    labels = np.array([p.label for p in pairs])
    a = bench.vectors([p.a for p in pairs])
    b = bench.vectors([p.b for p in pairs])
    cos = pair_cosines(a, b)
    floor = min(SWEEP)
    near = [i for i in range(len(pairs)) if cos[i] >= floor]  # guards matter only up there
    analyses = bench.analyses(name, {t for i in near for t in (pairs[i].a, pairs[i].b)})
    verdicts_near = bench.verdicts([(pairs[i].a, pairs[i].b) for i in near], analyses)
    allowed: dict[str, np.ndarray] = {}
    for variant, v in verdicts_near.items():
        full = np.zeros(len(pairs), dtype=bool)
        full[near] = v
        allowed[variant] = full
    everything = np.ones(len(pairs), dtype=bool)
    gpt_scores = gpt.scores(a, b)
    t0 = bench.config.threshold
    shipped = pair_rates(cos, labels, allowed["shipped"], t0)
    return {
        "pairs": len(pairs),
        "duplicates": int(labels.sum()),
        "bare": [pair_rates(cos, labels, everything, t).as_dict() for t in SWEEP],
        "guarded": [pair_rates(cos, labels, allowed["shipped"], t).as_dict() for t in SWEEP],
        "gptcache": [
            {
                **pair_rates(gpt_scores, labels, everything, gpt.rank_threshold(t)).as_dict(),
                "similarity_threshold": t,
            }
            for t in GPTCACHE_SWEEP
        ],
        "shipped": shipped.as_dict(),
        "shipped_no_guards": pair_rates(cos, labels, everything, t0).as_dict(),
        "ablations": {k: pair_rates(cos, labels, allowed[k], t0).as_dict() for k in ABLATIONS},
        "at_max_fpr": {
            "max_fpr": MAX_FPR,
            "bare": best_recall_at_fpr(cos, labels, everything, MAX_FPR).as_dict(),
            "guarded": best_recall_at_fpr(cos, labels, allowed["shipped"], MAX_FPR).as_dict(),
            "gptcache": best_recall_at_fpr(gpt_scores, labels, everything, MAX_FPR).as_dict(),
        },
        "at_shipped_fpr": {
            "max_fpr": shipped.fpr,
            "bare": best_recall_at_fpr(cos, labels, everything, shipped.fpr).as_dict(),
            "gptcache": best_recall_at_fpr(gpt_scores, labels, everything, shipped.fpr).as_dict(),
        },
        "label_ceiling": label_ceiling(
            [(p.a, p.b) for p in pairs], cos, labels, allowed["shipped"], MAX_FPR
        ),
        "by_kind": _hits_by_kind(pairs, (cos >= t0) & allowed["shipped"]),
    }


def _hits_by_kind(pairs: list[Pair], hit: np.ndarray) -> dict[str, dict[str, Any]]:
    """Hits of the shipped rule per kind of pair (own sets: paraphrases and each trap kind),
    with the pairs missed or hit shown for the report."""
    out: dict[str, dict[str, Any]] = {}
    for pair, h in zip(pairs, hit, strict=True):
        if not pair.kind:
            continue
        entry = out.setdefault(pair.kind, {"pairs": 0, "hits": 0, "wrong": []})
        entry["pairs"] += 1
        entry["hits"] += int(h)
        if bool(h) != bool(pair.label):
            entry["wrong"].append([pair.a, pair.b])
    return out


def run_workload(bench: Bench, name: str, gpt: GptCacheScorer) -> dict[str, Any]:
    prompts = load_workload(name)
    texts, groups = [p.text for p in prompts], [p.group for p in prompts]
    vectors = bench.vectors(texts)
    k = bench.config.candidates
    nb = earlier_neighbours(vectors, k)
    floor = min(SWEEP)
    cand = [
        (i, r)
        for i in range(len(texts))
        for r in range(k)
        if nb.index[i, r] >= 0 and nb.cosine[i, r] >= floor
    ]
    needed = {texts[i] for i, _ in cand} | {texts[int(nb.index[i, r])] for i, r in cand}
    analyses = bench.analyses(name, needed)
    verdicts = bench.verdicts([(texts[i], texts[int(nb.index[i, r])]) for i, r in cand], analyses)
    allowed: dict[str, np.ndarray] = {}
    for variant, v in verdicts.items():
        grid = np.zeros(nb.index.shape, dtype=bool)
        for (i, r), ok in zip(cand, v, strict=True):
            grid[i, r] = ok
        allowed[variant] = grid
    everything = np.ones(nb.index.shape, dtype=bool)
    # GPTCache: its best candidate is the top-1 (its score falls with distance).
    has = nb.index[:, 0] >= 0
    top = np.where(has, nb.index[:, 0], 0)
    gpt_rank = np.where(has, gpt.scores(vectors, vectors[top]), -np.inf).astype(np.float32)
    gpt_nb = replace(nb, cosine=np.repeat(gpt_rank[:, None], k, axis=1))
    t0 = bench.config.threshold

    margin = bench.config.answer_margin

    def rates(variant: str, t: float) -> dict[str, Any]:
        return replay_rates(nb, groups, allowed[variant], t, answer_margin=margin).as_dict()

    shipped = replay_rates(nb, groups, allowed["shipped"], t0, answer_margin=margin)
    fine = [round(0.5 + 0.0025 * i, 4) for i in range(200)]
    bare_fine = [replay_rates(nb, groups, everything, t, True) for t in SWEEP + tuple(fine)]
    gpt_fine = [replay_rates(gpt_nb, groups, everything, gpt.rank_threshold(t), True) for t in fine]
    return {
        "prompts": len(prompts),
        "at_shipped_fpr": {
            "max_fpr": shipped.fpr,
            "bare": _best_within(bare_fine, shipped.fpr),
            "gptcache": _best_within(gpt_fine, shipped.fpr),
        },
        "bare": [replay_rates(nb, groups, everything, t, top1_only=True).as_dict() for t in SWEEP],
        "guarded": [rates("shipped", t) for t in SWEEP],
        "gptcache": [
            {
                **replay_rates(gpt_nb, groups, everything, gpt.rank_threshold(t), True).as_dict(),
                "similarity_threshold": t,
            }
            for t in GPTCACHE_SWEEP
        ],
        "shipped": shipped.as_dict(),
        "shipped_no_guards": replay_rates(nb, groups, everything, t0, top1_only=True).as_dict(),
        "shipped_no_answer_check": replay_rates(nb, groups, allowed["shipped"], t0).as_dict(),
        "ablations": {a: rates(a, t0) for a in ABLATIONS},
    }


def _best_within(candidates: list[Rates], max_fpr: float) -> dict[str, Any]:
    """The highest-recall rate whose wrong-hit rate is at most max_fpr."""
    ok = [r for r in candidates if r.fpr <= max_fpr]
    return max(ok, key=lambda r: (r.recall, r.threshold)).as_dict() if ok else {}


def measure_latency(bench: Bench, samples: int) -> dict[str, float]:
    """Per-text cost on this machine: spaCy analysis, a bare single encode, one guard call."""
    texts = [p.text for p in load_workload("banking77")]
    texts = random.Random(7).sample(texts, samples)
    analyzer = bench.analyzers[bench.config.spacy_ner]
    guard = MeaningGuard(bench.config)
    bench.encoder.encode(texts[:8])
    analyze_ms, encode_ms, guard_us = [], [], []
    previous = analyzer.analyze(texts[-1])
    for text in texts:
        t = time.perf_counter()
        current = analyzer.analyze(text)
        analyze_ms.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        bench.encoder.encode([text])
        encode_ms.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        guard.compare(current, previous)
        guard_us.append((time.perf_counter() - t) * 1e6)
        previous = current
    return {
        "samples": samples,
        "analyze_p50_ms": float(np.percentile(analyze_ms, 50)),
        "analyze_p95_ms": float(np.percentile(analyze_ms, 95)),
        "encode_p50_ms": float(np.percentile(encode_ms, 50)),
        "guard_p50_us": float(np.percentile(guard_us, 50)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(PAIR_SETS + WORKLOADS))
    parser.add_argument("--skip", default="", help="sets to leave out, e.g. qqp")
    parser.add_argument("--qqp-sample", type=int, default=0, help="QQP pairs to use (0: all)")
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "quality.json")
    args = parser.parse_args(argv)

    config = SemanticConfig()
    bench = Bench(config)
    gpt = GptCacheScorer(bench.encoder.dim)
    results: dict[str, Any] = {"config": asdict(config), "pairs": {}, "workloads": {}}
    skipped = set(args.skip.split(","))
    for name in (n for n in args.sets.split(",") if n not in skipped):
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        if name in PAIR_SETS:
            pairs = load_pairs(name)
            if name == "qqp" and args.qqp_sample:
                pairs = random.Random(0).sample(pairs, min(args.qqp_sample, len(pairs)))
            results["pairs"][name] = run_pairs(bench, name, pairs, gpt)
        elif name in WORKLOADS:
            results["workloads"][name] = run_workload(bench, name, gpt)
        else:
            parser.error(f"unknown set {name!r}")
        print(f"   {time.perf_counter() - started:.0f} s", flush=True)
    if args.latency_samples:
        results["latency"] = measure_latency(bench, args.latency_samples)
    results["targets"] = targets(results)
    markdown = render_markdown(results)
    print(markdown)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    args.out.with_suffix(".md").write_text(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
