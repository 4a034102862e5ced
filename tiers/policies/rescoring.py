"""Two-stage similarity (`semantic.rescore_model`): which candidates the second model judges.

The first model (`semantic.model`, MiniLM by default) finds the candidates and decides alone
about those clearly above or clearly under their threshold. A candidate whose first-stage
similarity lies within `semantic.rescore_band` under its threshold is judged by the second
model's cosine instead (mapped onto the reference scale through that model's calibrated
threshold, like every model's: tiers/policies/similarity_scale.py), so only the lookups with
such a candidate pay for the second model's encoding of the query.

    similarity (reference scale)
    1.0 ┤ hit or miss by the first model (and the guards)
    t   ┤─────────────────────────────────────────── the candidate's effective threshold
        │ band: the second model's similarity decides
    t-b ┤───────────────────────────────────────────
        │ miss, the second model is never asked
    0   ┘

A pure policy: no I/O, no state after construction.
"""

from __future__ import annotations

import numpy as np

from tiers.policies.similarity_scale import RESCORE_SCALE, SimilarityScale


class RescoreBand:
    """Whether a candidate is re-scored, and its re-scored similarity."""

    def __init__(self, band: float, scale: SimilarityScale) -> None:
        assert 0 <= band < 1, f"rescore band {band} outside [0, 1)"
        self._band = band
        self._scale = scale

    def wants(self, similarity: float, threshold: float) -> bool:
        """Whether a first-stage `similarity` under `threshold` is near enough to re-score."""
        return similarity < threshold and threshold - similarity <= self._band

    def similarity(self, query: np.ndarray, cached: np.ndarray) -> float:
        """The second model's cosine of two vectors, on the reference scale."""
        return self._scale.common(RESCORE_SCALE, float(np.dot(query, cached)))
