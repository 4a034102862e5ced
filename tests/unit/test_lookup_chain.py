"""The cache service's lookup chain over real tiers: the in-process tier is asked first (without
an await), the next tier after it, fill-back, and stale entries kept for degraded answers.

Two real LRU-K tiers stand for "in-process" and "shared": only the first is asked synchronously.
"""

from __future__ import annotations

from core.clock import ManualClock
from core.config import LruKConfig
from core.recorder import CacheRecorder
from normalize.keys.request import CacheRequest, Route
from normalize.prompt_features import NoFeatures
from tests.support.entries import TAG, make_entry
from tiers.base import Entry, MatchKind, TierName
from tiers.lru_k import LruKTier
from tiers.service import CacheService

PARTITION = TAG + "p" * 48
REQUEST = CacheRequest(
    route=Route.CHAT,
    tenant="t",
    namespace="",
    model="m",
    partition=PARTITION,
    exact_key=TAG + "k",
    prompt_text=None,
    stream=False,
    include_usage=False,
)


class SharedTier(LruKTier):
    """A second tier, counting its lookups."""

    gets = 0

    async def get(self, key: str) -> Entry | None:
        self.gets += 1
        return await super().get(key)


class World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.memory = LruKTier(LruKConfig(), self.clock)
        self.shared = SharedTier(LruKConfig(), self.clock)
        self.service = CacheService([self.memory, self.shared], self.clock, CacheRecorder())

    def entry(self, name: str, ttl_s: float = 300.0, partition: str = PARTITION) -> Entry:
        return make_entry(
            name,
            partition=partition,
            exact_key=REQUEST.exact_key,
            stored_at=self.clock.time(),
            ttl_s=ttl_s,
            grace_s=600.0,
        )


async def test_an_in_process_hit_never_asks_the_next_tier() -> None:
    world = World()
    await world.service.store(world.entry("e1"))
    outcome = await world.service.lookup(REQUEST, NoFeatures())
    assert outcome.hit is not None and outcome.hit.tier is TierName.LRU_K
    assert outcome.hit.match is MatchKind.EXACT and world.shared.gets == 0


async def test_a_miss_in_process_asks_the_next_tier_and_fills_back() -> None:
    world = World()
    await world.shared.put(world.entry("e1"))
    first = await world.service.lookup(REQUEST, NoFeatures())
    assert first.hit is not None and world.shared.gets == 1
    assert await world.memory.get_by_id(f"{TAG}-e1") is not None  # filled back
    second = await world.service.lookup(REQUEST, NoFeatures())
    assert second.hit is not None and world.shared.gets == 1  # served in process now


async def test_an_expired_in_process_entry_is_kept_as_stale_while_the_next_tier_is_asked() -> None:
    world = World()
    await world.memory.put(world.entry("old", ttl_s=10.0))
    world.clock.advance(20.0)  # expired, within its grace period
    outcome = await world.service.lookup(REQUEST, NoFeatures())
    assert outcome.hit is None and world.shared.gets == 1
    assert outcome.stale is not None and outcome.stale.entry.entry_id == f"{TAG}-old"

    await world.shared.put(world.entry("new"))
    fresh = await world.service.lookup(REQUEST, NoFeatures())
    assert fresh.hit is not None and fresh.hit.entry.entry_id == f"{TAG}-new"


async def test_an_entry_of_another_partition_is_no_hit_and_no_stale() -> None:
    world = World()
    await world.memory.put(world.entry("e1", partition=TAG + "q" * 48))
    outcome = await world.service.lookup(REQUEST, NoFeatures())
    assert outcome.hit is None and outcome.stale is None


async def test_a_max_age_turns_an_old_in_process_hit_into_stale() -> None:
    world = World()
    await world.service.store(world.entry("e1"))
    world.clock.advance(60.0)
    outcome = await world.service.lookup(REQUEST, NoFeatures(), max_age_s=30.0)
    assert outcome.hit is None and outcome.stale is not None
