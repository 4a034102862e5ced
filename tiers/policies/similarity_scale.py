"""One scale for the cosines of every language's embedding model.

Each language embeds with a model of its own (English: `semantic.model`, all-MiniLM-L6-v2 by
default; Chinese: multilingual-e5-small), and two-stage mode's second English model
(`RESCORE_SCALE`) is one more; their cosines mean different things: e5's crowd into 0.93–1.0 where
MiniLM's spread over 0.5–1.0. Everything that compares a cosine with a level (the hit threshold,
an entry's floor and learned threshold, the answer margin, the answers' agreement) is defined
once, on the reference model's scale (`semantic.threshold`'s). A language's cosine is mapped
onto that scale by the straight line through (its own threshold, the reference threshold) and
(1, 1):

    common = reference + (cosine − anchor) × (1 − reference) / (1 − anchor)

so its calibrated threshold lands on the reference threshold, identical texts stay at 1, and
the self-calibrating threshold, the floors and the margins move every language alike. A pure
policy: no I/O, no state after construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.embedding_models import RESCORE_SCALE

__all__ = ["RESCORE_SCALE", "SimilarityScale"]


class SimilarityScale:
    """Maps a language's cosine onto the reference scale (see the module docstring)."""

    def __init__(self, reference: float, anchors: Mapping[str, float] | None = None) -> None:
        assert 0 < reference < 1, f"reference threshold {reference} outside (0, 1)"
        for language, anchor in (anchors or {}).items():
            assert 0 < anchor < 1, f"{language}: threshold {anchor} outside (0, 1)"
        self._reference = reference
        # language → (anchor, slope); languages not listed use the reference model's cosines.
        self._lines = MappingProxyType(
            {
                language: (anchor, (1 - reference) / (1 - anchor))
                for language, anchor in (anchors or {}).items()
                if anchor != reference
            }
        )

    def common(self, language: str, cosine: float) -> float:
        """`cosine`, measured by `language`'s model, on the reference scale."""
        line = self._lines.get(language)
        if line is None:
            return cosine
        anchor, slope = line
        return self._reference + (cosine - anchor) * slope
