"""What the semantic tier and the cache service do for learning from misses: the near-miss a
search notes (the nearest candidate that passed the guards but fell under its threshold within
`verify.learn_distance`), and hits served through an entry's learned threshold, marked as such.

The contract suite's vectors and entries (tests/contract/test_semantic_index.py), plus d at
cosine 0.87 from the query and e at 0.80; the threshold is 0.9, learn_distance 0.05 (default).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from core.clock import ManualClock
from core.config import LruKConfig
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.signature import Analysis
from tests.contract.test_semantic_explanation import NEGATED, REQUEST, ReadableFeatures
from tests.contract.test_semantic_index import (
    ANALYSIS,
    DIM,
    NOW_S,
    P1,
    QUERY,
    THRESHOLD,
    VARIANTS,
    A,
    add_all,
    build_tier,
    indexed,
    near,
)
from tiers.base import NearMiss
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.protocol import NearestNotes
from tiers.semantic.tier import SemanticTier
from tiers.service import CacheService

D = indexed("d", near(0.87, 4))
E = indexed("e", near(0.80, 5))


@pytest.fixture(params=list(VARIANTS))
async def tier(request: pytest.FixtureRequest) -> AsyncIterator[SemanticTier]:
    built = build_tier(request.param)
    yield built
    await built.close()


async def near_miss(tier: SemanticTier, query: Analysis = ANALYSIS) -> tuple[str, float] | None:
    notes = NearestNotes()
    assert await tier.search(P1, QUERY, query, notes=notes) == []
    if notes.near_miss is None:
        return None
    return notes.near_miss.entry_id.split("-", 1)[1], round(notes.near_miss.similarity, 4)


async def test_a_guard_passing_candidate_just_under_its_threshold_is_a_near_miss(
    tier: SemanticTier,
) -> None:
    await add_all(tier, E, D)
    assert await near_miss(tier) == ("d", 0.87)  # 0.03 under 0.9; e is 0.10 under


async def test_nothing_is_a_near_miss_further_than_the_learn_distance(tier: SemanticTier) -> None:
    await add_all(tier, E)
    assert await near_miss(tier) is None


async def test_a_candidate_the_guards_refuse_is_no_near_miss(tier: SemanticTier) -> None:
    await add_all(tier, D)
    assert await near_miss(tier, NEGATED) is None


async def test_with_learning_off_nothing_is_noted() -> None:
    config = SemanticConfig(threshold=THRESHOLD, flat_max_entries=1_000)
    off = SemanticTier(
        config,
        MeaningGuard(config),
        ThresholdController(VerifyConfig(learn_distance=0.0), THRESHOLD),
        ManualClock(wall_start_s=NOW_S),
        CacheRecorder(),
    )
    off.set_dimension(DIM)
    await add_all(off, D)
    assert await near_miss(off) is None
    await off.close()


async def test_an_entry_found_through_its_learned_threshold_is_marked_learned(
    tier: SemanticTier,
) -> None:
    await add_all(tier, D)
    await tier.update(replace(D, learned_threshold=0.86))  # as replicated by an `update`
    [candidate] = await tier.search(P1, QUERY, ANALYSIS)
    assert (round(candidate.similarity, 4), candidate.learned) == (0.87, True)
    await add_all(tier, A)
    [usual] = await tier.search(P1, QUERY, ANALYSIS)
    assert (usual.entry_id, usual.learned) == (A.entry_id, False)


async def test_a_learned_threshold_from_the_record_applies_when_indexed(tier: SemanticTier) -> None:
    await add_all(tier, replace(D, learned_threshold=0.86))
    [candidate] = await tier.search(P1, QUERY, ANALYSIS)
    assert candidate.learned


# --- the cache service ---------------------------------------------------------------------


def learning_service(tier: SemanticTier) -> tuple[CacheService, LruKTier]:
    clock = ManualClock(wall_start_s=NOW_S)
    memory = LruKTier(LruKConfig(), clock)
    service = CacheService([memory], clock, CacheRecorder(), semantic=tier, learning=True)
    return service, memory


async def test_a_miss_carries_its_near_miss_and_explains_only_when_asked(
    tier: SemanticTier,
) -> None:
    service, memory = learning_service(tier)
    await memory.put(D)
    await add_all(tier, D)
    outcome = await service.lookup(REQUEST, ReadableFeatures(ANALYSIS))
    assert outcome.hit is None and outcome.explanation is None
    assert outcome.near_miss is not None and outcome.near_miss.entry_id == D.entry_id
    assert outcome.near_miss == NearMiss(D.entry_id, outcome.near_miss.similarity)


async def test_a_service_without_learning_notes_no_near_miss(tier: SemanticTier) -> None:
    clock = ManualClock(wall_start_s=NOW_S)
    memory = LruKTier(LruKConfig(), clock)
    service = CacheService([memory], clock, CacheRecorder(), semantic=tier)
    await memory.put(D)
    await add_all(tier, D)
    assert (await service.lookup(REQUEST, ReadableFeatures(ANALYSIS))).near_miss is None


async def test_a_hit_through_a_learned_threshold_is_a_learned_lookup(tier: SemanticTier) -> None:
    service, memory = learning_service(tier)
    learned = replace(D, learned_threshold=0.86)
    await memory.put(learned)
    await add_all(tier, learned)
    outcome = await service.lookup(REQUEST, ReadableFeatures(ANALYSIS))
    assert outcome.hit is not None and outcome.hit.learned
    assert outcome.near_miss is None
