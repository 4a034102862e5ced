"""The semantic tier with two languages: each has its own index inside a partition, and a
language's cosines are read on the common scale (tiers/policies/similarity_scale.py).

Same hand-made 8-dimensional unit vectors as test_semantic_index.py; the Chinese threshold is
0.95 against the reference 0.90, so a Chinese cosine c counts as 0.90 + (c − 0.95) × 2.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from core.clock import ManualClock
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.meaning.guards import MeaningGuard
from tests.contract.test_semantic_index import ANALYSIS, DIM, NOW_S, QUERY, VARIANTS, indexed, near
from tests.support.entries import make_entry
from tiers.base import Entry
from tiers.policies.similarity_scale import SimilarityScale
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.tier import SemanticTier

CHINESE = replace(ANALYSIS, language="zh")


@pytest.fixture(params=list(VARIANTS))
async def tier(request: pytest.FixtureRequest) -> AsyncIterator[SemanticTier]:
    config = SemanticConfig(threshold=0.9, threshold_zh=0.95, **VARIANTS[request.param])
    scale = SimilarityScale(0.9, {"zh": 0.95})
    built = SemanticTier(
        config,
        MeaningGuard(config),
        ThresholdController(VerifyConfig(), 0.9, scale),
        ManualClock(wall_start_s=NOW_S),
        CacheRecorder(),
    )
    built.set_dimension(DIM, "en")
    built.set_dimension(DIM, "zh")
    yield built
    await built.close()


def chinese(name: str, cosine: float, own_axis: int) -> Entry:
    vector = near(cosine, own_axis).tobytes()
    return make_entry(name, analysis=CHINESE.to_wire(), vector=vector)


async def test_a_query_never_finds_an_entry_of_another_language(tier: SemanticTier) -> None:
    english = indexed("en", near(0.99, 1))
    await tier.add(english)
    zh = chinese("zh", 0.99, 2)
    assert zh.partition == english.partition
    await tier.add(zh)
    found_en = await tier.search(english.partition, QUERY, ANALYSIS)
    found_zh = await tier.search(english.partition, QUERY, CHINESE)
    assert [c.entry_id for c in found_en] == [english.entry_id]
    assert [c.entry_id for c in found_zh] == [zh.entry_id]
    assert tier.partitions() == 2


async def test_chinese_cosines_are_read_on_the_reference_scale(tier: SemanticTier) -> None:
    entry = chinese("zh", 0.97, 1)
    await tier.add(entry)
    (found,) = await tier.search(entry.partition, QUERY, CHINESE)
    assert found.similarity == pytest.approx(0.94, abs=1e-5)  # 0.90 + 0.02 × 2


async def test_a_chinese_cosine_under_its_own_threshold_misses(tier: SemanticTier) -> None:
    # 0.94 clears the reference 0.90 but not the Chinese 0.95 (0.88 on the common scale).
    entry = chinese("zh", 0.94, 1)
    await tier.add(entry)
    assert await tier.search(entry.partition, QUERY, CHINESE) == []


async def test_an_entry_of_a_language_without_a_model_is_not_indexed() -> None:
    config = SemanticConfig()
    only_english = SemanticTier(
        config,
        MeaningGuard(config),
        ThresholdController(VerifyConfig(), 0.9),
        ManualClock(wall_start_s=NOW_S),
        CacheRecorder(),
    )
    only_english.set_dimension(DIM, "en")
    await only_english.add(chinese("zh", 0.99, 1))
    assert only_english.size() == 0
    await only_english.close()
