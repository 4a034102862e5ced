"""What the cache core may ask about a prompt beyond its exact key, computed only on demand.

The lemma analysis and the embedding cost milliseconds, so they are computed only once the
exact key has missed everywhere, once per request, and reused when the answer is stored
(`normalize/runtime/model_features.py` has the real implementation).

`NoFeatures` is the "off" object: for deployments without the semantic tier, for prompts the
configured pipeline cannot read (another language, too long), and for prompts that look like
injection attempts. Those get exact matches only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from normalize.keys.request import CacheRequest
from normalize.meaning.signature import Analysis


@dataclass(frozen=True, slots=True)
class PromptAnalysis:
    """The lemma view of a prompt."""

    analysis: Analysis
    # None when lemma-key lookups are turned off.
    lemma_key: str | None
    wire: str


class PromptFeatures(Protocol):
    async def analysis(self) -> PromptAnalysis | None:
        """None when the prompt may not be matched loosely."""
        ...

    async def vector(self) -> np.ndarray | None:
        """The prompt's L2-normalized embedding, or None when not eligible."""
        ...

    def semantic_allowed(self) -> bool:
        """Whether loose matches (lemma key, semantic) may answer this prompt at all."""
        ...


class FeatureSource(Protocol):
    def for_request(self, request: CacheRequest, loose_matching: bool) -> PromptFeatures:
        """Features of `request`'s prompt; `loose_matching` false forbids lemma and semantic
        matches (e.g. a prompt that looks like an injection attempt)."""
        ...


class NoFeatures:
    async def analysis(self) -> PromptAnalysis | None:
        return None

    async def vector(self) -> np.ndarray | None:
        return None

    def semantic_allowed(self) -> bool:
        return False


class NoFeatureSource:
    """The semantic tier turned off: exact matches only."""

    def for_request(self, request: CacheRequest, loose_matching: bool) -> PromptFeatures:
        return NoFeatures()
