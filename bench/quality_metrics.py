"""Metrics for `bench.quality`: labelled pairs, workload replay, and GPTCache's scorer.

Pairs: a pair (a, b) is a hit when the query a would be answered with the entry cached for b.
precision = right hits / hits, recall = right hits / duplicate pairs, false-positive rate (FPR)
= wrong hits / non-duplicate pairs.

Workloads: prompts are replayed in file order; each looks up the `candidates` nearest earlier
prompts (by cosine, as the FAISS tier would) and hits the first one at or above the threshold
that the guards accept. A hit is right when that prompt has the same group. hit-P = right hits
/ hits; hit-R = right hits / prompts that had an earlier prompt of their own group; wrong-hit
rate = wrong hits / lookups.

GPTCache: its `SearchDistanceEvaluation` scores a candidate as `max_distance - d` with d the
squared L2 distance its FAISS store (`IDMap,Flat`, METRIC_L2) returns, and its adapter hits when
score ≥ (max - min) × similarity_threshold. With unit vectors d = 2 - 2·cos, so its threshold t
means cos ≥ 2t - 1 (its default 0.8 is cos ≥ 0.6). We run its classes, not that formula.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Rates:
    threshold: float
    hits: int
    right: int
    wrong: int
    precision: float
    recall: float
    fpr: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rates(threshold: float, right: int, wrong: int, positives: int, negatives: int) -> Rates:
    hits = right + wrong
    return Rates(
        threshold=round(threshold, 4),
        hits=hits,
        right=right,
        wrong=wrong,
        precision=right / hits if hits else 1.0,
        recall=right / positives if positives else 0.0,
        fpr=wrong / negatives if negatives else 0.0,
    )


# --- pairs -----------------------------------------------------------------------------------


def pair_cosines(a: FloatArray, b: FloatArray) -> FloatArray:
    return np.einsum("ij,ij->i", a, b).astype(np.float32)


def pair_rates(
    scores: FloatArray, labels: npt.NDArray[np.int_], allowed: BoolArray, threshold: float
) -> Rates:
    """Rates of the rule `score ≥ threshold and allowed` over labelled pairs."""
    hit = (scores >= threshold) & allowed
    positive = labels == 1
    return _rates(
        threshold,
        int(np.sum(hit & positive)),
        int(np.sum(hit & ~positive)),
        int(np.sum(positive)),
        int(np.sum(~positive)),
    )


def best_recall_at_fpr(
    scores: FloatArray, labels: npt.NDArray[np.int_], allowed: BoolArray, max_fpr: float
) -> Rates:
    """The lowest threshold (highest recall) whose false-positive rate is ≤ max_fpr."""
    negatives = int(np.sum(labels == 0))
    budget = int(np.floor(max_fpr * negatives))
    neg_scores = np.sort(scores[(labels == 0) & allowed])[::-1]
    if len(neg_scores) <= budget:
        threshold = float(np.min(scores)) if len(scores) else 0.0
    else:
        # Just above the (budget+1)-th highest allowed negative.
        threshold = float(np.nextafter(neg_scores[budget], np.float32(np.inf)))
    return pair_rates(scores, labels, allowed, threshold)


def label_ceiling(
    texts: Sequence[tuple[str, str]],
    scores: FloatArray,
    labels: npt.NDArray[np.int_],
    allowed: BoolArray,
    max_fpr: float,
) -> dict[str, Any]:
    """How far the labels themselves let any hit rule go at FPR ≤ max_fpr.

    - `identical` / `near_identical`: pairs whose texts are equal once case, spacing and
      punctuation are ignored, and pairs at cosine ≥ 0.99: the share labelled duplicate is the
      precision even a perfect reader of meaning gets on them (label noise).
    - `never_block_duplicates`: the best recall at max_fpr if the guards kept every block of a
      non-duplicate but never blocked a duplicate: no change to the guards can beat it.
    - `needed_precision`: the precision the hits must have for twice the bare threshold's recall
      within the false-positive budget.
    """
    identical = np.array([_canonical(a) == _canonical(b) for a, b in texts], dtype=bool)
    near = scores >= 0.99
    bare = best_recall_at_fpr(scores, labels, np.ones(len(labels), dtype=bool), max_fpr)
    budget = int(np.floor(max_fpr * int(np.sum(labels == 0))))
    needed_right = 2 * bare.right
    return {
        "identical": _labelled_share(labels, identical),
        "near_identical": _labelled_share(labels, near),
        "never_block_duplicates": best_recall_at_fpr(
            scores, labels, allowed | (labels == 1), max_fpr
        ).as_dict(),
        "needed_recall": 2 * bare.recall,
        "needed_precision": needed_right / (needed_right + budget) if needed_right else 0.0,
    }


def _canonical(text: str) -> str:
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text.casefold()).split())


def _labelled_share(labels: npt.NDArray[np.int_], mask: BoolArray) -> dict[str, Any]:
    pairs = int(np.sum(mask))
    duplicates = int(np.sum(labels[mask] == 1))
    return {"pairs": pairs, "duplicates": duplicates, "share": duplicates / pairs if pairs else 0.0}


# --- workloads -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Neighbours:
    """For each prompt i, its k nearest earlier prompts (indices, cosines; best first)."""

    index: npt.NDArray[np.int64]
    cosine: FloatArray
    # Two-stage (bench/quality_modes.py): the first stage's similarities, which the tier's
    # answer check reads for the other neighbours; None: `cosine` itself.
    first: FloatArray | None = None


def earlier_neighbours(vectors: FloatArray, k: int, chunk: int = 512) -> Neighbours:
    n = len(vectors)
    index = np.full((n, k), -1, dtype=np.int64)
    cosine = np.full((n, k), -np.inf, dtype=np.float32)
    for start in range(1, n, chunk):
        stop = min(n, start + chunk)
        sims = vectors[start:stop] @ vectors[:stop].T
        rows = np.arange(start, stop)[:, None]
        sims[np.arange(stop)[None, :] >= rows] = -np.inf  # only earlier prompts
        take = min(k, stop)
        top = np.argpartition(-sims, take - 1, axis=1)[:, :take]
        top_sims = np.take_along_axis(sims, top, axis=1)
        order = np.argsort(-top_sims, axis=1)
        index[start:stop, :take] = np.take_along_axis(top, order, axis=1)
        cosine[start:stop, :take] = np.take_along_axis(top_sims, order, axis=1)
    index[cosine == -np.inf] = -1
    return Neighbours(index, cosine)


def replay_rates(
    neighbours: Neighbours,
    groups: Sequence[str],
    allowed: BoolArray,
    threshold: float,
    top1_only: bool = False,
    answer_margin: float = 0.0,
) -> Rates:
    """Rates of a replay; `allowed[i, r]` is the guards' verdict on prompt i's r-th candidate.
    With `answer_margin` > 0, the neighbour-answer check of the semantic tier: no hit when
    another candidate within that margin of the chosen one passes the guards but has another
    group (the group is the answer here)."""
    n = len(groups)
    seen: set[str] = set()
    eligible = right = wrong = 0
    for i in range(n):
        if groups[i] in seen:
            eligible += 1
        seen.add(groups[i])
        ranks = range(1 if top1_only else neighbours.index.shape[1])
        for r in ranks:
            j = int(neighbours.index[i, r])
            if j < 0:
                break
            # Not `break`: a two-stage similarity (bench/quality_modes.py) is not in rank
            # order; the tier walks every candidate too.
            if neighbours.cosine[i, r] < threshold:
                continue
            if allowed[i, r]:
                if answer_margin > 0 and _contradicted(
                    neighbours, groups, allowed, i, r, answer_margin
                ):
                    break
                if groups[j] == groups[i]:
                    right += 1
                else:
                    wrong += 1
                break
    return _rates(threshold, right, wrong, eligible, max(n - 1, 1))


def _contradicted(
    neighbours: Neighbours, groups: Sequence[str], allowed: BoolArray, i: int, r: int, margin: float
) -> bool:
    chosen = groups[int(neighbours.index[i, r])]
    # As the tier: the chosen one's similarity as judged, the others' as the first stage found.
    others = neighbours.cosine if neighbours.first is None else neighbours.first
    for other in range(neighbours.index.shape[1]):
        j = int(neighbours.index[i, other])
        if other == r or j < 0:
            continue
        if others[i, other] < neighbours.cosine[i, r] - margin:
            continue
        if allowed[i, other] and groups[j] != chosen:
            return True
    return False


# --- GPTCache --------------------------------------------------------------------------------


class GptCacheScorer:
    """GPTCache's hit decision: its FAISS store's distance, its evaluation, its threshold rule."""

    def __init__(self, dim: int) -> None:
        from gptcache.manager.vector_data.base import VectorData
        from gptcache.manager.vector_data.faiss import Faiss
        from gptcache.similarity_evaluation import SearchDistanceEvaluation

        self._store_factory: Callable[[], Any] = lambda: Faiss("/nonexistent.faiss", dim, 1)
        self._vector_data = VectorData
        self.evaluation = SearchDistanceEvaluation()

    def scores(self, queries: FloatArray, cached: FloatArray) -> FloatArray:
        """GPTCache's rank of each query against its own cached vector."""
        out = np.empty(len(queries), dtype=np.float32)
        for i, (q, c) in enumerate(zip(queries, cached, strict=True)):
            store = self._store_factory()
            store.mul_add([self._vector_data(id=0, data=c)])
            distance, ident = store.search(q, top_k=1)[0]
            out[i] = self.evaluation.evaluation({}, {"search_result": (distance, ident)})
        return out

    def rank_threshold(self, similarity_threshold: float) -> float:
        """The adapter's rule: (max_rank - min_rank) × similarity_threshold, clamped."""
        lo, hi = self.evaluation.range()
        return float(min(hi, max(lo, (hi - lo) * similarity_threshold)))
