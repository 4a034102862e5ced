"""What the semantic tier notes about its nearest candidate for a lookup asked to explain itself
(X-Deja-Explain), and the explanation the cache service makes of it.

The vectors and entries are the contract suite's (tests/contract/test_semantic_index.py): a at
cosine 0.97 from the query, b at 0.95, c at 0.85; the threshold is 0.9. Real meaning guards
compare hand-made analyses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np
import pytest

from core.clock import ManualClock
from core.config import LruKConfig
from core.recorder import CacheRecorder, GuardName
from normalize.keys.request import CacheRequest, Route
from normalize.meaning.signature import Analysis, MeaningSignature
from normalize.prompt_features import PromptAnalysis, SemanticSkip
from tests.contract.test_semantic_index import (
    ANALYSIS,
    NOW_S,
    P1,
    QUERY,
    VARIANTS,
    A,
    B,
    C,
    add_all,
    axis,
    build_tier,
)
from tiers.base import LookupExplanation, MatchKind
from tiers.lru_k import LruKTier
from tiers.semantic.protocol import NearestNotes
from tiers.semantic.tier import SemanticTier
from tiers.service import CacheService

# The query with a negator the entries' prompts do not have ("how do I not reset my pin").
NEGATED = Analysis(
    ("reset", "pin"),
    MeaningSignature(negations=1, negated=("reset",)),
    words=frozenset({"reset", "pin"}),
)


@pytest.fixture(params=list(VARIANTS))
async def tier(request: pytest.FixtureRequest) -> AsyncIterator[SemanticTier]:
    built = build_tier(request.param)
    yield built
    await built.close()


async def noted(
    tier: SemanticTier, query: Analysis = ANALYSIS, threshold_override: float | None = None
) -> tuple[float | None, float | None, GuardName | None]:
    notes = NearestNotes()
    await tier.search(P1, QUERY, query, threshold_override, notes=notes)
    similarity = None if notes.similarity is None else round(notes.similarity, 4)
    threshold = None if notes.threshold is None else round(notes.threshold, 4)
    return similarity, threshold, notes.refused


async def test_a_candidate_below_the_threshold_is_noted_without_a_refusal(
    tier: SemanticTier,
) -> None:
    await add_all(tier, C)
    assert await noted(tier) == (0.85, 0.9, None)


async def test_the_threshold_noted_is_the_one_the_candidate_needed(tier: SemanticTier) -> None:
    await add_all(tier, replace(C, threshold=0.95))
    assert await noted(tier) == (0.85, 0.95, None)  # its own floor, above the global 0.9
    assert await noted(tier, threshold_override=0.8) == (0.85, 0.8, None)  # relaxed


async def test_a_candidate_the_guards_refuse_names_the_guard(tier: SemanticTier) -> None:
    await add_all(tier, A)
    assert await noted(tier, query=NEGATED) == (0.97, 0.9, GuardName.NEGATION)
    opaque = Analysis.opaque("how do i reset my pin")
    assert await noted(tier, query=opaque) == (0.97, 0.9, GuardName.LANGUAGE)


async def test_the_nearest_refused_candidate_is_noted_not_a_further_one(
    tier: SemanticTier,
) -> None:
    await add_all(tier, A, C)  # a refused by the guard, c below the threshold
    assert await noted(tier, query=NEGATED) == (0.97, 0.9, GuardName.NEGATION)


async def test_a_candidate_the_answer_check_refuses_says_answers(tier: SemanticTier) -> None:
    await add_all(
        tier,
        replace(A, answer_vector=axis(6).tobytes()),
        replace(B, answer_vector=axis(7).tobytes()),
    )
    assert await noted(tier) == (0.97, 0.9, GuardName.ANSWERS)


async def test_the_candidate_served_is_noted_over_a_nearer_refused_one(
    tier: SemanticTier,
) -> None:
    await add_all(tier, replace(A, threshold=0.99), B)
    assert await noted(tier) == (0.95, 0.9, None)


# --- the explanation the service makes of it ---------------------------------------------


class ReadableFeatures:
    """A prompt the semantic tier looks at: the query analysis and vector."""

    def __init__(self, analysis: Analysis) -> None:
        self._analysis = analysis

    async def analysis(self) -> PromptAnalysis | None:
        return PromptAnalysis(self._analysis, None, self._analysis.to_wire())

    async def vector(self) -> np.ndarray | None:
        return QUERY

    async def rescore_vector(self) -> np.ndarray | None:
        return None  # one-stage mode

    def semantic_allowed(self) -> bool:
        return True

    def skip_reason(self) -> SemanticSkip | None:
        return None


REQUEST = CacheRequest(Route.CHAT, "t", "", "m", P1, P1[:16] + "q", "q", False, False)


def service_over(tier: SemanticTier) -> tuple[CacheService, LruKTier]:
    clock = ManualClock(wall_start_s=NOW_S)
    memory = LruKTier(LruKConfig(), clock)
    return CacheService([memory], clock, CacheRecorder(), semantic=tier), memory


async def test_a_semantic_hit_is_explained_with_its_similarity_and_threshold(
    tier: SemanticTier,
) -> None:
    service, memory = service_over(tier)
    await memory.put(A)
    await add_all(tier, A)
    outcome = await service.lookup(REQUEST, ReadableFeatures(ANALYSIS), explain=True)
    assert outcome.hit is not None and outcome.explanation is not None
    explanation = outcome.explanation
    assert explanation.served is MatchKind.SEMANTIC and explanation.refused is None
    assert (round(explanation.similarity or 0, 4), explanation.threshold) == (0.97, 0.9)


async def test_a_semantic_miss_is_explained_by_its_nearest_candidate(tier: SemanticTier) -> None:
    service, memory = service_over(tier)
    await memory.put(A)
    await add_all(tier, A)
    outcome = await service.lookup(REQUEST, ReadableFeatures(NEGATED), explain=True)
    assert outcome.hit is None and outcome.explanation is not None
    assert outcome.explanation.refused is GuardName.NEGATION
    assert outcome.explanation.served is None
    plain = await service.lookup(REQUEST, ReadableFeatures(NEGATED))
    assert plain.hit is None and plain.explanation is None


async def test_an_empty_partition_explains_nothing(tier: SemanticTier) -> None:
    service, _ = service_over(tier)
    outcome = await service.lookup(REQUEST, ReadableFeatures(ANALYSIS), explain=True)
    assert outcome.explanation == LookupExplanation()
