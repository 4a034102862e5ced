"""One contract, every in-process tier (`tiers.base.InProcessTier`; LRU-K is the one there is):
`get_now` answers exactly what `get` answers, without an await. The cache service asks the
first tier that way when `isinstance(tier, InProcessTier)`, so a tier that is not held in
this process must not claim to be.

The rest of what these tiers promise is the key-value contract (test_cache_tier.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.clock import ManualClock
from core.config import LruKConfig, RedisConfig
from tests.support.entries import TAG, make_entry
from tiers.base import Entry, InProcessTier
from tiers.lru_k import LruKTier
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier

# tests.support.entries stores its entries at 1_700_001_000 for 300 s, plus 60 s of grace.
NOW_S = 1_700_001_010.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(wall_start_s=NOW_S)


@pytest.fixture(params=["lru_k"])
def tier(request: pytest.FixtureRequest, clock: ManualClock) -> InProcessTier:
    assert request.param == "lru_k"
    return LruKTier(LruKConfig(), clock)


def entry(name: str = "a") -> Entry:
    return make_entry(name, lemma_key=f"{TAG}l{name}")


async def test_get_now_answers_what_get_answers(tier: InProcessTier) -> None:
    stored = entry()
    await tier.put(stored)
    assert tier.get_now(stored.exact_key) == stored
    assert tier.get_now(stored.lemma_key or "") == stored
    assert tier.get_now(TAG + "nothing") is None
    for key in (stored.exact_key, stored.lemma_key or "", TAG + "nothing"):
        assert tier.get_now(key) == await tier.get(key)


async def test_get_now_sees_replacements_and_deletions(tier: InProcessTier) -> None:
    stored = entry()
    await tier.put(stored)
    updated = replace(stored, ttl_s=42.0, threshold=0.95)
    assert await tier.replace(updated)
    assert tier.get_now(stored.exact_key) == updated
    newer = entry("newer")
    await tier.put(replace(newer, exact_key=stored.exact_key))  # supersedes it
    assert tier.get_now(stored.exact_key) == replace(newer, exact_key=stored.exact_key)
    assert await tier.delete(newer.entry_id)
    assert tier.get_now(stored.exact_key) is None
    assert tier.get_now(newer.lemma_key or "") is None


async def test_get_now_serves_an_entry_in_grace_and_nothing_once_gone(
    tier: InProcessTier, clock: ManualClock
) -> None:
    stored = entry()
    await tier.put(stored)
    clock.advance(stored.expires_at - NOW_S + 1.0)  # expired, in its grace
    assert tier.get_now(stored.exact_key) == stored
    clock.advance(stored.grace_s)  # past TTL + grace
    assert tier.get_now(stored.exact_key) is None
    assert await tier.get(stored.exact_key) is None


def test_only_in_process_tiers_claim_to_be() -> None:
    # Built, never started: the check reads the class, not the server.
    config = RedisConfig(url="redis://127.0.0.1:1/0")
    assert not isinstance(RedisTier(RedisConnection(config), config), InProcessTier)
    assert isinstance(LruKTier(LruKConfig(), ManualClock()), InProcessTier)
