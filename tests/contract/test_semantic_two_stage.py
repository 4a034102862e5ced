"""Two-stage mode in the semantic tier (`semantic.rescore_model`, tiers/policies/rescoring.py):
the first model's similarity decides above the threshold and far under it; a candidate within
`rescore_band` under its threshold is judged by the second model's similarity.

Real FAISS, real meaning guards, a manual clock; the vectors of both stages are hand-made unit
vectors (tests/contract/test_semantic_index.py), and the query's second-stage vector comes
through the tier's own seam, the `rescore` callable, which counts how often it was asked. The
second model's threshold is 0.80 against the reference 0.90, so its cosine c counts as
0.90 + (c − 0.80) × 0.5.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from core.clock import ManualClock
from core.embedding_models import RESCORE_SCALE
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.meaning.guards import MeaningGuard
from tests.contract.test_semantic_index import (
    ANALYSIS,
    DIM,
    NOW_S,
    P1,
    QUERY,
    VARIANTS,
    indexed,
    near,
)
from tiers.base import Entry
from tiers.entry_codec import decode_fields, encode_fields
from tiers.policies.rescoring import RescoreBand
from tiers.policies.similarity_scale import SimilarityScale
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.tier import SemanticTier
from tiers.semantic.vector_rows import cosine_error_bound

SECOND_DIM = 6
BAND = 0.05


def second(cosine: float) -> np.ndarray:
    """A second-stage vector at `cosine` from the query's second-stage vector (axis 0)."""
    vector = np.zeros(SECOND_DIM, dtype=np.float32)
    vector[0], vector[1] = cosine, np.sqrt(1.0 - cosine**2)
    return vector


SECOND_QUERY = second(1.0)


class QueryVector:
    """The query's second-stage vector, counted: the tier must ask only for band candidates."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(self) -> np.ndarray | None:
        self.asked += 1
        return SECOND_QUERY


@pytest.fixture(params=list(VARIANTS))
async def tier(request: pytest.FixtureRequest) -> AsyncIterator[SemanticTier]:
    config = SemanticConfig(
        threshold=0.9, rescore_model="mpnet", rescore_band=BAND, **VARIANTS[request.param]
    )
    scale = SimilarityScale(0.9, {RESCORE_SCALE: 0.80})
    built = SemanticTier(
        config,
        MeaningGuard(config),
        ThresholdController(VerifyConfig(), 0.9, scale),
        ManualClock(wall_start_s=NOW_S),
        CacheRecorder(),
        RescoreBand(BAND, scale),
    )
    built.set_dimension(DIM, "en")
    built.set_rescore_dimension(SECOND_DIM)
    yield built
    await built.close()


def both(name: str, first_cosine: float, second_cosine: float | None) -> Entry:
    rescore = None if second_cosine is None else second(second_cosine).tobytes()
    return indexed(name, near(first_cosine, 1), rescore_vector=rescore)


async def test_a_band_candidate_the_second_model_finds_close_hits(tier: SemanticTier) -> None:
    entry = both("a", 0.87, 0.96)  # under 0.90 by 0.03: in the band; 0.96 → 0.98
    await tier.add(entry)
    query = QueryVector()
    (found,) = await tier.search(P1, QUERY, ANALYSIS, rescore=query)
    assert found.entry_id == entry.entry_id
    # The rescore vector is held as float16: within the bound of tiers/semantic/vector_rows.py
    # (the common scale's slope here is 0.5, so within half of it).
    assert found.similarity == pytest.approx(0.98, abs=cosine_error_bound(SECOND_DIM) / 2)
    assert query.asked == 1
    assert tier.rescored == 1


async def test_a_band_candidate_the_second_model_finds_far_misses(tier: SemanticTier) -> None:
    await tier.add(both("a", 0.88, 0.70))  # 0.70 → 0.85: under 0.90
    query = QueryVector()
    assert await tier.search(P1, QUERY, ANALYSIS, rescore=query) == []
    assert query.asked == 1


async def test_a_candidate_over_the_threshold_is_judged_by_the_first_model(
    tier: SemanticTier,
) -> None:
    entry = both("a", 0.95, 0.10)  # the second model would refuse it: it is not asked
    await tier.add(entry)
    query = QueryVector()
    (found,) = await tier.search(P1, QUERY, ANALYSIS, rescore=query)
    assert (found.entry_id, query.asked) == (entry.entry_id, 0)
    assert found.similarity == pytest.approx(0.95, abs=1e-5)


async def test_a_candidate_under_the_band_misses_without_asking(tier: SemanticTier) -> None:
    await tier.add(both("a", 0.80, 1.0))  # 0.10 under the threshold, past the band
    query = QueryVector()
    assert await tier.search(P1, QUERY, ANALYSIS, rescore=query) == []
    assert query.asked == 0


async def test_an_entry_without_a_second_vector_is_judged_by_the_first(
    tier: SemanticTier,
) -> None:
    # An entry stored in one-stage mode (or by a replica configured so): nothing to re-score.
    await tier.add(both("a", 0.88, None))
    query = QueryVector()
    assert await tier.search(P1, QUERY, ANALYSIS, rescore=query) == []
    assert query.asked == 0


async def test_a_second_vector_of_another_width_is_not_used(tier: SemanticTier) -> None:
    entry = indexed("a", near(0.88, 1), rescore_vector=np.ones(4, dtype=np.float32).tobytes())
    await tier.add(entry)
    query = QueryVector()
    assert await tier.search(P1, QUERY, ANALYSIS, rescore=query) == []
    assert query.asked == 0


async def test_the_second_vector_arrives_with_an_update(tier: SemanticTier) -> None:
    entry = both("a", 0.87, None)
    await tier.add(entry)
    await tier.update(both("a", 0.87, 0.96))
    (found,) = await tier.search(P1, QUERY, ANALYSIS, rescore=QueryVector())
    assert found.entry_id == entry.entry_id


async def test_a_relaxed_lookup_never_rescores(tier: SemanticTier) -> None:
    await tier.add(both("a", 0.87, 0.96))
    query = QueryVector()
    found = await tier.search(P1, QUERY, ANALYSIS, threshold_override=0.85, rescore=query)
    assert len(found) == 1 and query.asked == 0


async def test_without_a_query_vector_the_band_candidate_misses(tier: SemanticTier) -> None:
    await tier.add(both("a", 0.87, 0.96))

    async def unavailable() -> np.ndarray | None:
        return None  # the second model's worker is down

    assert await tier.search(P1, QUERY, ANALYSIS, rescore=unavailable) == []


def test_the_second_vector_is_kept_in_the_redis_record() -> None:
    entry = both("a", 0.87, 0.96)
    decoded = decode_fields(encode_fields(entry, 1 << 20))
    assert decoded.rescore_vector == entry.rescore_vector
    assert decode_fields(encode_fields(both("b", 0.87, None), 1 << 20)).rescore_vector is None


def test_the_band_is_under_the_threshold_only() -> None:
    band = RescoreBand(0.05, SimilarityScale(0.85, {RESCORE_SCALE: 0.75}))
    assert [band.wants(s, 0.85) for s in (0.86, 0.85, 0.84, 0.80, 0.79)] == [
        False,
        False,
        True,
        True,
        False,
    ]
    assert band.similarity(second(1.0), second(0.75)) == pytest.approx(0.85, abs=1e-6)
