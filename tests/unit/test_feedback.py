"""Feedback on entries: the TTL recomputed, eviction at −1.6, complaints about semantic hits.

Real LRU-K tier under a real CacheService; the clock is manual and the jitter pinned to 1.
"""

from __future__ import annotations

import pytest

from core.clock import ManualClock
from core.config import LruKConfig, TtlConfig
from core.recorder import CacheRecorder
from core.semantic_config import VerifyConfig
from proxy.answering.feedback import FeedbackService, ServedRecord, ServedRequests
from tests.support.entries import TAG, make_entry
from tiers.base import Entry, MatchKind
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import ThresholdController
from tiers.policies.ttl import TtlPolicy
from tiers.service import CacheService


class World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.recorder = CacheRecorder()
        self.lru = LruKTier(LruKConfig(), self.clock)
        self.service = CacheService([self.lru], self.clock, self.recorder)
        self.thresholds = ThresholdController(VerifyConfig(), 0.86)
        self.feedback = FeedbackService(
            self.service,
            TtlPolicy(TtlConfig(jitter_min=1.0, jitter_max=1.0)),
            self.thresholds,
            self.recorder,
        )

    async def stored(self, confidence: float = 1.0, certainty: float = 1.0) -> Entry:
        entry = make_entry(
            "e1",
            partition=TAG + "p",
            exact_key="k1",
            stored_at=self.clock.time(),
            grace_s=3600.0,
            confidence=confidence,
            certainty=certainty,
            threshold=0.80,
        )
        await self.service.store(entry)
        return entry

    async def current(self, entry_id: str = f"{TAG}-e1") -> Entry | None:
        return await self.service.get_entry(entry_id)


async def test_useful_feedback_lengthens_the_ttl_and_is_stored_with_the_entry() -> None:
    world = World()
    entry = await world.stored()
    outcome = await world.feedback.apply(entry, "useful")
    assert (outcome.evicted, outcome.feedback, outcome.ttl_s) == (False, (1.2,), 390.0)
    current = await world.current()
    assert current is not None
    assert (current.feedback, current.ttl_s, current.stored_at) == ((1.2,), 390.0, entry.stored_at)


async def test_the_ttl_is_recomputed_from_the_stored_confidence_and_certainty() -> None:
    world = World()
    entry = await world.stored(confidence=0.6, certainty=0.4)  # factor 0.5: 150 s
    outcome = await world.feedback.apply(entry, 0.4)  # 0.5 + 0.25·0.4 = 0.6
    assert outcome.ttl_s == pytest.approx(180.0)


async def test_two_irrelevant_signals_evict_the_entry() -> None:
    world = World()
    entry = await world.stored()
    first = await world.feedback.apply(entry, "irrelevant")
    assert (first.evicted, first.ttl_s) == (False, 240.0)
    current = await world.current()
    assert current is not None and current.feedback == (-0.8,)
    second = await world.feedback.apply(current, "irrelevant")
    assert second.evicted and second.feedback == (-0.8, -0.8)
    assert await world.current() is None
    assert await world.lru.get("k1") is None
    assert world.recorder.snapshot().evictions_by_feedback == 1


async def test_a_useful_signal_in_the_window_saves_the_entry_until_it_scrolls_out() -> None:
    world = World()
    entry = await world.stored()
    for signal in ("useful", "irrelevant", "irrelevant"):
        current = await world.current()
        assert current is not None
        outcome = await world.feedback.apply(current, signal)
    assert not outcome.evicted and outcome.feedback == (1.2, -0.8, -0.8)
    assert outcome.ttl_s == pytest.approx(300 * 0.9)
    current = await world.current()
    assert current is not None
    outcome = await world.feedback.apply(current, -0.8)  # the useful one scrolls out
    assert outcome.evicted and outcome.feedback == (-0.8, -0.8, -0.8)
    assert entry.entry_id == outcome.entry_id


async def test_a_complaint_about_a_semantic_hit_raises_the_floor_above_its_similarity() -> None:
    world = World()
    entry = await world.stored()
    served = ServedRecord(entry.entry_id, "t", MatchKind.SEMANTIC, 0.91)
    outcome = await world.feedback.apply(entry, "irrelevant", served)
    assert outcome.threshold == pytest.approx(0.92)
    current = await world.current()
    assert current is not None and current.threshold == pytest.approx(0.92)
    assert world.thresholds.global_threshold == 0.86  # shared by every tenant: not moved
    assert world.thresholds.complaints == 1
    assert world.thresholds.estimator.estimate().verified == 0


@pytest.mark.parametrize(
    "signal,match",
    [("irrelevant", MatchKind.EXACT), ("irrelevant", None), ("useful", MatchKind.SEMANTIC)],
)
async def test_other_feedback_leaves_thresholds_alone(signal: str, match: MatchKind | None) -> None:
    world = World()
    entry = await world.stored()
    similarity = 0.91 if match is MatchKind.SEMANTIC else None
    outcome = await world.feedback.apply(
        entry, signal, ServedRecord(entry.entry_id, "t", match, similarity)
    )
    assert outcome.threshold == 0.80
    assert world.thresholds.global_threshold == 0.86
    assert world.thresholds.complaints == 0


def test_served_requests_remember_a_bounded_number_of_recent_requests() -> None:
    served = ServedRequests(capacity=2)
    for i in range(3):
        served.remember(f"r{i}", ServedRecord(f"e{i}", "t", None, None))
    assert served.get("r0") is None
    assert served.get("r1") == ServedRecord("e1", "t", None, None)
    assert served.get("r2") is not None


def test_served_requests_without_capacity_remember_nothing() -> None:
    served = ServedRequests(capacity=0)  # no admin API
    assert not served.enabled and ServedRequests().enabled
    served.remember("r0", ServedRecord("e0", "t", None, None))
    assert served.get("r0") is None and served.get("r0", "t") is None


def test_served_requests_keep_tenants_apart() -> None:
    served = ServedRequests(capacity=3)
    served.remember("req-1", ServedRecord("e-a", "tenant-a", None, None))
    served.remember("req-1", ServedRecord("e-b", "tenant-b", None, None))
    assert served.get("req-1", "tenant-a") == ServedRecord("e-a", "tenant-a", None, None)
    assert served.get("req-1", "tenant-b") == ServedRecord("e-b", "tenant-b", None, None)
    assert served.get("req-1") == ServedRecord("e-b", "tenant-b", None, None)  # the admin: latest
    assert served.get("req-1", "tenant-c") is None
    for n in range(3):
        served.remember(f"req-{n + 2}", ServedRecord(f"e{n}", "tenant-a", None, None))
    assert served.get("req-1", "tenant-a") is None and served.get("req-1", "tenant-b") is None
    assert served.get("req-1") is None
