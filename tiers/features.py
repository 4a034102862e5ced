"""What the cache core may ask about a prompt beyond its exact key, computed only on demand.

The lemma analysis (spaCy) and the embedding (MiniLM) cost milliseconds, so they are computed
only when the exact key has missed everywhere, once per request, and reused when the answer is
stored. `NoFeatures` is the "off" object for deployments without the semantic tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from normalize.request import CacheRequest


@dataclass(frozen=True, slots=True)
class PromptAnalysis:
    """The lemma view of a prompt: its lemma key and the wire form of its analysis."""

    lemma_key: str
    wire: str


class PromptFeatures(Protocol):
    async def analysis(self) -> PromptAnalysis | None:
        """None when the prompt cannot be analysed (not eligible, unsupported language)."""
        ...

    async def vector(self) -> np.ndarray | None:
        """The prompt's L2-normalized embedding, or None when not eligible."""
        ...

    def semantic_allowed(self) -> bool:
        """Whether loose matches (lemma key, semantic) may answer this prompt at all."""
        ...


class NoFeatures:
    async def analysis(self) -> PromptAnalysis | None:
        return None

    async def vector(self) -> np.ndarray | None:
        return None

    def semantic_allowed(self) -> bool:
        return False


class FeatureSource(Protocol):
    def for_request(self, request: CacheRequest, loose_matching: bool) -> PromptFeatures:
        """Features of `request`'s prompt; `loose_matching` false forbids lemma and semantic
        matches (e.g. a prompt that looks like an injection attempt)."""
        ...


class NoFeatureSource:
    """The semantic tier turned off: exact matches only."""

    def for_request(self, request: CacheRequest, loose_matching: bool) -> PromptFeatures:
        return NoFeatures()
