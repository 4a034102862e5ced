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
from enum import StrEnum
from typing import Protocol

import numpy as np

from normalize.keys.request import CacheRequest
from normalize.meaning.signature import Analysis


class SemanticSkip(StrEnum):
    """Why loose matches (lemma key, semantic) never looked at a prompt: the X-Deja-Explain
    response header's `refused=` for a prompt no candidate was compared with."""

    LANGUAGE = "language"  # the language gate: a script or language the pipeline cannot read
    LENGTH = "length"  # longer than semantic.analysis_max_chars
    SCREEN = "screen"  # the injection screen (normalize/keys/screen.py)
    EXACT_ONLY = "exact_only"  # keyed whole: a tool loop, non-text parts, /v1/completions
    SEMANTIC_OFF = "semantic_off"  # no semantic tier, its models loading, or its worker down
    NO_LOOKUP = "no_lookup"  # no lookup at all: Cache-Control no-cache, an uncached route


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

    def vector_if_ready(self) -> np.ndarray | None:
        """The embedding if it is already computed, without waiting (None: not yet, or not
        eligible). A lemma-key hit's answer check uses it, so that no hit waits for one."""
        ...

    async def rescore_vector(self) -> np.ndarray | None:
        """Two-stage mode: the prompt's embedding by the second model, computed once, when
        first asked (None: one-stage mode, or not eligible)."""
        ...

    def semantic_allowed(self) -> bool:
        """Whether loose matches (lemma key, semantic) may answer this prompt at all."""
        ...

    def skip_reason(self) -> SemanticSkip | None:
        """Why loose matches did not look at this prompt (None: they did, or may). Asked only
        to explain a lookup, after `semantic_allowed` and `analysis`."""
        ...


class FeatureSource(Protocol):
    def for_request(self, request: CacheRequest, loose_matching: bool) -> PromptFeatures:
        """Features of `request`'s prompt; `loose_matching` false forbids lemma and semantic
        matches (e.g. a prompt that looks like an injection attempt)."""
        ...


class NoFeatures:
    """No loose matching, for `reason`."""

    def __init__(self, reason: SemanticSkip = SemanticSkip.SEMANTIC_OFF) -> None:
        self._reason = reason

    async def analysis(self) -> PromptAnalysis | None:
        return None

    async def vector(self) -> np.ndarray | None:
        return None

    def vector_if_ready(self) -> np.ndarray | None:
        return None

    async def rescore_vector(self) -> np.ndarray | None:
        return None

    def semantic_allowed(self) -> bool:
        return False

    def skip_reason(self) -> SemanticSkip | None:
        return self._reason


class NoFeatureSource:
    """The semantic tier turned off: exact matches only."""

    def for_request(self, request: CacheRequest, loose_matching: bool) -> PromptFeatures:
        return NoFeatures(SemanticSkip.SEMANTIC_OFF)
