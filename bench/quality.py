"""Semantic-cache quality: Deja's hit rule against a bare threshold and GPTCache, on the dev data.

    .venv/bin/python -m bench.quality                       # everything, full data
    .venv/bin/python -m bench.quality --sets paws-wiki,mrpc --qqp-sample 5000
    .venv/bin/python -m bench.quality --skip qqp            # all but QQP (while iterating)
    .venv/bin/python -m bench.quality --model minilm,mpnet,two-stage --skip qqp   # side by side

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
import functools
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
    Neighbours,
    Rates,
    best_recall_at_fpr,
    earlier_neighbours,
    label_ceiling,
    pair_cosines,
    pair_rates,
    replay_rates,
)
from bench.quality_models_report import render_side_by_side
from bench.quality_modes import MODES, Mode, Scores, neighbours_at
from bench.quality_report import render_markdown, targets
from core.semantic_config import SemanticConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.meaning.signature import Analysis
from normalize.runtime.sentence_encoder import Encoder, load_encoder

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
    def __init__(self, config: SemanticConfig, mode: Mode) -> None:
        self.config = config
        self.mode = mode
        # Each model as the proxy's embedding workers load and call it, here in process, loaded
        # only when a text is not in its embedding cache yet.
        self._encoders: dict[str, Encoder] = {}
        self.embeddings = {m.name: EmbeddingCache(m.title) for m in mode.models}
        # One parse (with NER) serves every variant: NER does not change tags or the parse.
        self.parser = LemmaAnalyzer(replace(config, spacy_ner=True))
        self.analyzers = {False: LemmaAnalyzer(replace(config, spacy_ner=False)), True: self.parser}
        self.variants: dict[str, SemanticConfig] = {"shipped": config}
        for name, change in ABLATIONS.items():
            self.variants[name] = replace(config, **change)  # type: ignore[arg-type]

    def encoder(self, name: str) -> Encoder:
        if name not in self._encoders:
            self._encoders[name] = load_encoder(name, self.config.torch_threads)
        return self._encoders[name]

    def vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The vectors of `texts` by each of the mode's models, in its order."""
        return [
            cache.vectors(texts, functools.partial(self._encode, name))
            for name, cache in self.embeddings.items()
        ]

    def _encode(self, name: str, texts: Sequence[str]) -> np.ndarray:
        return self.encoder(name).encode(texts)

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
    scores = bench.mode.pair_scores([pair_cosines(x, y) for x, y in zip(a, b, strict=True)])
    floor = min(SWEEP)
    upper = scores.upper()
    near = [i for i in range(len(pairs)) if upper[i] >= floor]  # guards matter only up there
    analyses = bench.analyses(name, {t for i in near for t in (pairs[i].a, pairs[i].b)})
    verdicts_near = bench.verdicts([(pairs[i].a, pairs[i].b) for i in near], analyses)
    allowed: dict[str, np.ndarray] = {}
    for variant, v in verdicts_near.items():
        full = np.zeros(len(pairs), dtype=bool)
        full[near] = v
        allowed[variant] = full
    everything = np.ones(len(pairs), dtype=bool)
    # GPTCache over the first stage's vectors.
    gpt_scores = gpt.scores(a[0], b[0])
    t0 = bench.config.threshold
    cos = scores.at(t0)
    shipped = pair_rates(cos, labels, allowed["shipped"], t0)
    return {
        "pairs": len(pairs),
        "duplicates": int(labels.sum()),
        "rescored_share": scores.rescored_share(t0),
        "bare": [pair_rates(scores.at(t), labels, everything, t).as_dict() for t in SWEEP],
        "guarded": [
            pair_rates(scores.at(t), labels, allowed["shipped"], t).as_dict() for t in SWEEP
        ],
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
    first_nb = earlier_neighbours(vectors[0], k)
    grid = _neighbour_scores(bench.mode, first_nb, vectors)
    upper = grid.upper().reshape(first_nb.cosine.shape)
    floor = min(SWEEP)
    cand = [
        (i, r)
        for i in range(len(texts))
        for r in range(k)
        if first_nb.index[i, r] >= 0 and upper[i, r] >= floor
    ]
    needed = {texts[i] for i, _ in cand} | {texts[int(first_nb.index[i, r])] for i, r in cand}
    analyses = bench.analyses(name, needed)
    verdicts = bench.verdicts(
        [(texts[i], texts[int(first_nb.index[i, r])]) for i, r in cand], analyses
    )
    allowed: dict[str, np.ndarray] = {}
    for variant, v in verdicts.items():
        grid_ok = np.zeros(first_nb.index.shape, dtype=bool)
        for (i, r), ok in zip(cand, v, strict=True):
            grid_ok[i, r] = ok
        allowed[variant] = grid_ok
    everything = np.ones(first_nb.index.shape, dtype=bool)
    # GPTCache: its best candidate is the top-1 (its score falls with distance).
    has = first_nb.index[:, 0] >= 0
    top = np.where(has, first_nb.index[:, 0], 0)
    gpt_rank = np.where(has, gpt.scores(vectors[0], vectors[0][top]), -np.inf).astype(np.float32)
    gpt_nb = replace(first_nb, cosine=np.repeat(gpt_rank[:, None], k, axis=1))
    t0 = bench.config.threshold

    margin = bench.config.answer_margin

    def nb(t: float) -> Neighbours:
        return neighbours_at(first_nb, grid, t)

    def rates(variant: str, t: float) -> dict[str, Any]:
        return replay_rates(nb(t), groups, allowed[variant], t, answer_margin=margin).as_dict()

    shipped = replay_rates(nb(t0), groups, allowed["shipped"], t0, answer_margin=margin)
    fine = [round(0.5 + 0.0025 * i, 4) for i in range(200)]
    bare_fine = [replay_rates(nb(t), groups, everything, t, True) for t in SWEEP + tuple(fine)]
    gpt_fine = [replay_rates(gpt_nb, groups, everything, gpt.rank_threshold(t), True) for t in fine]
    return {
        "prompts": len(prompts),
        "rescored_share": _lookups_rescored(grid, first_nb, t0),
        "at_shipped_fpr": {
            "max_fpr": shipped.fpr,
            "bare": _best_within(bare_fine, shipped.fpr),
            "gptcache": _best_within(gpt_fine, shipped.fpr),
        },
        "bare": [replay_rates(nb(t), groups, everything, t, True).as_dict() for t in SWEEP],
        "guarded": [rates("shipped", t) for t in SWEEP],
        "gptcache": [
            {
                **replay_rates(gpt_nb, groups, everything, gpt.rank_threshold(t), True).as_dict(),
                "similarity_threshold": t,
            }
            for t in GPTCACHE_SWEEP
        ],
        "shipped": shipped.as_dict(),
        "shipped_no_guards": replay_rates(nb(t0), groups, everything, t0, top1_only=True).as_dict(),
        "shipped_no_answer_check": replay_rates(nb(t0), groups, allowed["shipped"], t0).as_dict(),
        "ablations": {a: rates(a, t0) for a in ABLATIONS},
    }


def _neighbour_scores(mode: Mode, nb: Neighbours, vectors: list[np.ndarray]) -> Scores:
    """The mode's similarities over the first stage's neighbour grid (prompt i, rank r): the
    second model's cosine of the same two prompts where there is a second stage."""
    if len(vectors) == 1:
        return mode.pair_scores([nb.cosine.ravel()])
    rows, ranks = np.nonzero(nb.index >= 0)
    second = np.full(nb.cosine.shape, -np.inf, dtype=np.float32)
    other = vectors[1]
    second[rows, ranks] = np.einsum("ij,ij->i", other[rows], other[nb.index[rows, ranks]])
    scores = mode.pair_scores([nb.cosine.ravel(), second.ravel()])
    assert scores.second is not None
    # Missing neighbours stay at -inf on both scales.
    fixed = np.where(np.isfinite(second.ravel()), scores.second, -np.inf).astype(np.float32)
    return Scores(scores.first, fixed, scores.band)


def _lookups_rescored(grid: Scores, nb: Neighbours, t: float) -> float:
    """Share of lookups with at least one candidate in the band: those ask the second model
    for the query's vector (an upper bound: a hit found first stops the walk)."""
    if grid.second is None:
        return 0.0
    first = grid.first.reshape(nb.cosine.shape)
    band = (first < t) & (first >= t - grid.band)
    return float(band.any(axis=1).mean())


def _best_within(candidates: list[Rates], max_fpr: float) -> dict[str, Any]:
    """The highest-recall rate whose wrong-hit rate is at most max_fpr."""
    ok = [r for r in candidates if r.fpr <= max_fpr]
    return max(ok, key=lambda r: (r.recall, r.threshold)).as_dict() if ok else {}


def measure_latency(bench: Bench, samples: int) -> dict[str, Any]:
    """Per-text cost on this machine: spaCy analysis, a bare single encode by each of the
    mode's models, one guard call."""
    texts = [p.text for p in load_workload("banking77")]
    texts = random.Random(7).sample(texts, samples)
    analyzer = bench.analyzers[bench.config.spacy_ner]
    guard = MeaningGuard(bench.config)
    encoders = {m.name: bench.encoder(m.name) for m in bench.mode.models}
    for encoder in encoders.values():
        encoder.encode(texts[:8])
    analyze_ms, guard_us = [], []
    encode_ms: dict[str, list[float]] = {name: [] for name in encoders}
    previous = analyzer.analyze(texts[-1])
    for text in texts:
        t = time.perf_counter()
        current = analyzer.analyze(text)
        analyze_ms.append((time.perf_counter() - t) * 1e3)
        for name, encoder in encoders.items():
            t = time.perf_counter()
            encoder.encode([text])
            encode_ms[name].append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        guard.compare(current, previous)
        guard_us.append((time.perf_counter() - t) * 1e6)
        previous = current
    first = bench.mode.models[0].name
    return {
        "samples": samples,
        "analyze_p50_ms": float(np.percentile(analyze_ms, 50)),
        "analyze_p95_ms": float(np.percentile(analyze_ms, 95)),
        "encode_p50_ms": float(np.percentile(encode_ms[first], 50)),
        "encode_p50_ms_by_model": {n: float(np.percentile(v, 50)) for n, v in encode_ms.items()},
        "guard_p50_us": float(np.percentile(guard_us, 50)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(PAIR_SETS + WORKLOADS))
    parser.add_argument("--skip", default="", help="sets to leave out, e.g. qqp")
    parser.add_argument("--qqp-sample", type=int, default=0, help="QQP pairs to use (0: all)")
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument(
        "--model",
        default="minilm",
        help=f"embedding modes to measure, comma-separated: {', '.join(MODES)}",
    )
    parser.add_argument(
        "--anchor",
        type=float,
        default=None,
        help="the cosine of the mode's other model (mpnet, e5-small) that counts as"
        " semantic.threshold (default: its calibrated one; semantic.threshold itself reads"
        " its raw cosines, for calibrating)",
    )
    parser.add_argument("--band", type=float, default=None, help="two-stage: semantic.rescore_band")
    parser.add_argument("--out", type=Path, default=RESULTS / "quality.json")
    args = parser.parse_args(argv)

    config = SemanticConfig()
    modes = [m for m in args.model.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown --model {', '.join(unknown)} (known: {', '.join(MODES)})")
    band = config.rescore_band if args.band is None else args.band
    by_mode: dict[str, dict[str, Any]] = {}
    for mode_name in modes:
        mode = Mode(mode_name, config.threshold, band, args.anchor)
        print(f"#### mode {mode_name}", flush=True)
        results = run_mode(Bench(config, mode), args)
        by_mode[mode_name] = results
        # The MiniLM run alone keeps its historical file name.
        out = args.out if modes == ["minilm"] else args.out.with_name(f"quality-{mode_name}.json")
        markdown = render_markdown(results)
        print(markdown)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
        out.with_suffix(".md").write_text(markdown)
    if len(by_mode) > 1:
        side = render_side_by_side(by_mode)
        print(side)
        args.out.with_name("quality-models.md").write_text(side)
    return 0


def run_mode(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    mode = bench.mode
    gpt = GptCacheScorer(mode.models[0].dim)
    results: dict[str, Any] = {
        "config": asdict(bench.config),
        "mode": {"name": mode.name, "band": mode.band, "anchor": mode.anchor},
        "pairs": {},
        "workloads": {},
    }
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
            raise SystemExit(f"unknown set {name!r}")
        print(f"   {time.perf_counter() - started:.0f} s", flush=True)
    if args.latency_samples:
        results["latency"] = measure_latency(bench, args.latency_samples)
    results["targets"] = targets(results)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
