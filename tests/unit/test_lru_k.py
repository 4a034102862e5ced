"""LRU-K: eviction order on small hand-computed scenarios, then the tier's bounds and TTLs."""

from __future__ import annotations

import random

import pytest

from core.clock import ManualClock
from core.config import LruKConfig
from tests.support.entries import make_entry
from tiers.base import Entry
from tiers.lru_k import LruKTier
from tiers.policies.lru_k import LruKPolicy

TAG = "0" * 16


class Cache:
    """A 3-slot cache driven by the policy alone, recording what it evicts."""

    def __init__(self, k: int = 2, capacity: int = 3, history: int = 10) -> None:
        self.policy: LruKPolicy[str] = LruKPolicy(k, history)
        self.capacity = capacity
        self.resident: set[str] = set()
        self.evicted: list[str] = []

    def ref(self, key: str, t: float) -> None:
        if key in self.resident:
            self.policy.record_access(key, t)
            return
        self.resident.add(key)
        self.policy.admit(key, t)
        while len(self.resident) > self.capacity:
            victim = self.policy.choose_victim(exclude=key)
            assert victim is not None
            self.policy.evict(victim)
            self.resident.discard(victim)
            self.evicted.append(victim)


def test_cold_keys_go_first_in_lru_order_and_retained_history_counts() -> None:
    cache = Cache()
    for t, key in enumerate("abc", start=1):
        cache.ref(key, t)  # a@1 b@2 c@3, all seen once
    cache.ref("d", 4)  # full: the least recently used cold key goes
    assert cache.evicted == ["a"]
    cache.ref("b", 5)  # b now has two accesses: K-th most recent = 2
    cache.ref("a", 6)  # a comes back; its retained history makes it [1, 6]: hot at once
    assert cache.evicted == ["a", "c"]  # c (last seen 3) goes before d (last seen 4)
    cache.ref("e", 7)  # the new key is never its own victim: cold d goes
    assert cache.evicted == ["a", "c", "d"]
    cache.ref("f", 8)  # residents b [2,5], a [1,6], e [7]: cold e goes before any hot key
    assert cache.evicted == ["a", "c", "d", "e"]
    cache.ref("g", 9)  # a scan of new keys only ever displaces the previous new key
    assert cache.evicted == ["a", "c", "d", "e", "f"]


def test_among_hot_keys_the_oldest_kth_access_goes() -> None:
    cache = Cache(capacity=3)
    for t, key in [(1, "a"), (2, "b"), (3, "c"), (4, "c"), (5, "a"), (6, "b"), (7, "b")]:
        cache.ref(key, t)
    # a: [1, 5]  b: [6, 7]  c: [3, 4]  → backward 2-distance: a oldest (1), then c (3), then b (6)
    cache.ref("d", 8)  # d is excluded; every other key is hot
    assert cache.evicted == ["a"]
    cache.ref("d", 9)  # d: [8, 9], hot
    cache.ref("e", 10)
    assert cache.evicted == ["a", "c"]


def test_correlated_references_count_once() -> None:
    policy: LruKPolicy[str] = LruKPolicy(k=2, history_capacity=0, correlated_period_s=1.0)
    policy.admit("a", 0.0)
    policy.record_access("a", 0.5)  # a retry burst, not a second use
    assert policy.backward_k_distance("a", 10.0) == float("inf")
    policy.record_access("a", 2.0)
    assert policy.backward_k_distance("a", 10.0) == 10.0 - 0.5


def test_forget_drops_history_and_evict_keeps_it() -> None:
    policy: LruKPolicy[str] = LruKPolicy(k=2, history_capacity=1)
    policy.admit("a", 1.0)
    policy.evict("a")
    policy.admit("a", 2.0)
    assert policy.backward_k_distance("a", 3.0) == 2.0  # history [1, 2]
    policy.forget("a")
    policy.admit("a", 4.0)
    assert policy.backward_k_distance("a", 5.0) == float("inf")


def test_retained_history_is_bounded() -> None:
    policy: LruKPolicy[str] = LruKPolicy(k=2, history_capacity=1)
    for t, key in enumerate("ab", start=1):
        policy.admit(key, t)
    policy.evict("a")
    policy.evict("b")  # pushes a's history out
    policy.admit("a", 5.0)
    assert policy.backward_k_distance("a", 6.0) == float("inf")


@pytest.mark.parametrize("seed", range(5))
def test_victims_match_the_definition_under_random_traffic(seed: int) -> None:
    """Against a brute-force LRU-K (every key's full access history kept): the victim is the
    least recently used key with fewer than K accesses, else the key whose K-th most recent
    access is oldest. Deletions (forget) and readmissions with retained history included."""
    rng, k = random.Random(seed), 2
    policy: LruKPolicy[int] = LruKPolicy(k, history_capacity=10**6)
    history: dict[int, list[float]] = {}  # the definition's own bookkeeping
    resident: set[int] = set()

    def expected() -> int:
        cold = [key for key in resident if len(history[key]) < k]
        if cold:
            return min(cold, key=lambda key: history[key][-1])
        return min(resident, key=lambda key: history[key][-k])

    for step in range(3000):
        t, key = float(step), rng.randrange(40)
        history.setdefault(key, []).append(t)
        if key in resident:
            policy.record_access(key, t)
        else:
            resident.add(key)
            policy.admit(key, t)
        if rng.random() < 0.05:  # a deletion: the key and its history go
            gone = rng.choice(sorted(resident))
            policy.forget(gone)
            resident.discard(gone)
            del history[gone]
        while len(resident) > 12:
            victim = policy.choose_victim()
            assert victim == expected(), f"step {step}"
            policy.evict(victim)
            resident.discard(victim)


def entry(
    key: str, body_bytes: int = 10, ttl_s: float = 300.0, stored_at: float = 1_700_001_000.0
) -> Entry:
    return make_entry(key, body=b"{" + b"x" * body_bytes + b"}", stored_at=stored_at, ttl_s=ttl_s)


async def test_tier_evicts_by_lru_k_when_over_entry_count() -> None:
    clock = ManualClock(start_s=0.0, wall_start_s=1_700_001_000.0)
    tier = LruKTier(LruKConfig(k=2, max_entries=2, history_entries=10), clock)
    await tier.put(entry("a"))
    clock.advance(1)
    await tier.put(entry("b"))
    clock.advance(1)
    assert await tier.get(TAG + "a") is not None  # a: two accesses now
    clock.advance(1)
    await tier.put(entry("c"))  # b is the only cold resident besides c
    assert await tier.get(TAG + "b") is None
    assert await tier.get(TAG + "a") is not None
    assert await tier.count() == 2
    assert tier.evictions == 1


async def test_tier_evicts_to_stay_under_its_byte_budget() -> None:
    clock = ManualClock(start_s=0.0, wall_start_s=1_700_001_000.0)
    one = entry("a", body_bytes=2000).size_bytes
    tier = LruKTier(LruKConfig(max_entries=100, max_bytes=2 * one + 10), clock)
    for key in "abc":
        clock.advance(1)
        await tier.put(entry(key, body_bytes=2000))
    assert await tier.count() == 2
    assert tier.bytes_used <= 2 * one + 10
    assert await tier.get(TAG + "a") is None


async def test_tier_refuses_an_entry_larger_than_its_budget() -> None:
    tier = LruKTier(LruKConfig(max_bytes=2048), ManualClock())
    await tier.put(entry("big", body_bytes=4096))
    assert await tier.count() == 0


@pytest.mark.parametrize("elapsed_s,present", [(299, True), (359, True), (361, False)])
async def test_tier_keeps_entries_until_ttl_plus_grace(elapsed_s: float, present: bool) -> None:
    clock = ManualClock(start_s=0.0, wall_start_s=1_700_001_000.0)
    tier = LruKTier(LruKConfig(), clock)
    await tier.put(entry("a"))  # ttl 300 s, grace 60 s
    clock.advance(elapsed_s)
    assert (await tier.get(TAG + "a") is not None) is present


async def test_the_tier_holds_entries_without_their_vectors() -> None:
    # A hit never needs them; they would triple a short answer's footprint.
    tier = LruKTier(LruKConfig(), ManualClock(wall_start_s=1_700_001_010.0))
    entry = make_entry("v", vector=b"\x01" * 1536, answer_vector=b"\x02" * 1536)
    await tier.put(entry)
    held = await tier.get(entry.exact_key)
    assert held is not None and (held.vector, held.answer_vector) == (None, None)
    assert held.body == entry.body
    assert await tier.replace(entry)
    held = await tier.get_by_id(entry.entry_id)
    assert held is not None and held.answer_vector is None
