"""`CacheService.matching`, the admin listing: each entry once (as the nearest tier holds it),
newest first, gone entries left out, a tier that is down skipped."""

from __future__ import annotations

from dataclasses import replace

from core.clock import ManualClock
from core.config import LruKConfig
from core.errors import TierUnavailable
from core.recorder import CacheRecorder
from tests.support.entries import TAG, make_entry
from tiers.base import Entry, Invalidation
from tiers.lru_k import LruKTier
from tiers.service import CacheService


class DownTier(LruKTier):
    async def matching(self, selector: Invalidation) -> list[Entry]:
        raise TierUnavailable("redis is unreachable")


def world(shared: LruKTier | None = None) -> tuple[ManualClock, LruKTier, LruKTier, CacheService]:
    clock = ManualClock()
    memory = LruKTier(LruKConfig(), clock)
    shared = shared or LruKTier(LruKConfig(), clock)
    return clock, memory, shared, CacheService([memory, shared], clock, CacheRecorder())


def at(clock: ManualClock, name: str, **fields: object) -> Entry:
    return make_entry(name, stored_at=clock.time(), grace_s=60.0, **fields)


async def test_each_entry_once_newest_first_the_nearest_tiers_copy() -> None:
    clock, memory, shared, service = world()
    old = at(clock, "old")
    await shared.put(old)
    await memory.put(replace(old, feedback=(1.0,)))  # the in-process copy is the newer record
    clock.advance(10)
    await shared.put(at(clock, "mid", model="other"))
    clock.advance(10)
    await memory.put(at(clock, "new"))

    entries, total = await service.matching(Invalidation(), 10)
    assert [e.entry_id for e in entries] == [f"{TAG}-new", f"{TAG}-mid", f"{TAG}-old"]
    assert total == 3 and entries[2].feedback == (1.0,)
    first, total = await service.matching(Invalidation(), 1)
    assert ([e.entry_id for e in first], total) == ([f"{TAG}-new"], 3)
    others, total = await service.matching(Invalidation(model="other"), 10)
    assert ([e.entry_id for e in others], total) == ([f"{TAG}-mid"], 1)


async def test_gone_entries_are_not_listed_but_stale_ones_are() -> None:
    clock, memory, _, service = world()
    await memory.put(at(clock, "short", ttl_s=10.0))  # gone after 10 + 60 s
    await memory.put(at(clock, "long", ttl_s=100.0))
    clock.advance(30)
    entries, _ = await service.matching(Invalidation(), 10)
    assert {e.entry_id for e in entries} == {f"{TAG}-short", f"{TAG}-long"}
    clock.advance(50)
    entries, total = await service.matching(Invalidation(), 10)
    assert ([e.entry_id for e in entries], total) == ([f"{TAG}-long"], 1)


async def test_a_tier_that_is_down_is_skipped_and_counted() -> None:
    clock, recorder = ManualClock(), CacheRecorder()
    memory = LruKTier(LruKConfig(), clock)
    service = CacheService([memory, DownTier(LruKConfig(), clock)], clock, recorder)
    await memory.put(at(clock, "here"))
    entries, total = await service.matching(Invalidation(), 10)
    assert ([e.entry_id for e in entries], total) == ([f"{TAG}-here"], 1)
    assert recorder.snapshot().tier_errors == {"lru_k": 1}  # DownTier keeps LRU-K's name
