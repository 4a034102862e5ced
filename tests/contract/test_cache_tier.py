"""One contract, every key-value tier: LRU-K in process, Redis on a real server and on a real
six-node Redis Cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from core.clock import SystemClock
from core.config import LruKConfig, RedisConfig
from tests.support.entries import make_entry as shared_entry
from tiers.base import CacheTier, Entry, Invalidation
from tiers.lru_k import LruKTier
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier

TAG = "ab" * 8


def make_entry(name: str, **fields: object) -> Entry:
    """The shared builder's entry under this suite's own tag, with a lemma key, an analysis
    and a body that names it."""
    values: dict[str, object] = {
        "entry_id": f"{TAG}-{name}",
        "tenant": "tenant-1",
        "partition": TAG + "0" * 48,
        "exact_key": f"{TAG}x{name}",
        "lemma_key": f"{TAG}l{name}",
        "body": b'{"object":"chat.completion","choices":[{"index":0,"message":{"content":"'
        + name.encode()
        + b'"}}]}',
        "stored_at": time.time(),
        "analysis": '{"v":1}',
    }
    return shared_entry(name, **{**values, **fields})


@pytest.fixture(params=["lru_k", "redis", "redis_cluster"])
async def tier(request: pytest.FixtureRequest) -> AsyncIterator[CacheTier]:
    if request.param == "lru_k":
        yield LruKTier(LruKConfig(), SystemClock())
        return
    cluster = request.param == "redis_cluster"
    url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    config = RedisConfig(url=url, cluster=cluster, compress_min_bytes=256)
    connection = RedisConnection(config)
    await connection.start()
    yield RedisTier(connection, config)
    await connection.close()


async def test_put_then_get_by_exact_key_lemma_key_and_id(tier: CacheTier) -> None:
    entry = make_entry("a")
    await tier.put(entry)
    assert await tier.get(entry.exact_key) == entry
    assert await tier.get(entry.lemma_key or "") == entry
    assert await tier.get_by_id(entry.entry_id) == entry
    assert await tier.count() == 1


async def test_unknown_keys_miss(tier: CacheTier) -> None:
    assert await tier.get(TAG + "nothing") is None
    assert await tier.get_by_id(TAG + "-nothing") is None


async def test_large_bodies_round_trip(tier: CacheTier) -> None:
    text = "lorem ipsum " * 2000
    entry = make_entry("big", body=f'{{"text":"{text}"}}'.encode(), vector=b"\x00\x01" * 384)
    await tier.put(entry)
    found = await tier.get(entry.exact_key)
    assert found is not None and found.body == entry.body


async def test_replace_updates_and_refuses_missing_entries(tier: CacheTier) -> None:
    entry = make_entry("a")
    await tier.put(entry)
    updated = replace(entry, ttl_s=42.0, feedback=(1.2, -0.8), threshold=0.9)
    assert await tier.replace(updated)
    assert await tier.get(entry.exact_key) == updated
    assert not await tier.replace(make_entry("ghost"))
    assert await tier.get_by_id(make_entry("ghost").entry_id) is None


async def test_delete_removes_the_entry_and_its_keys(tier: CacheTier) -> None:
    entry = make_entry("a")
    await tier.put(entry)
    assert await tier.delete(entry.entry_id)
    assert await tier.get(entry.exact_key) is None
    assert await tier.get(entry.lemma_key or "") is None
    assert not await tier.delete(entry.entry_id)


async def test_a_newer_entry_for_the_same_question_wins(tier: CacheTier) -> None:
    old = make_entry("old", exact_key=f"{TAG}xsame", lemma_key=None)
    new = make_entry("new", exact_key=f"{TAG}xsame", lemma_key=None)
    assert await tier.put(old) is None
    assert await tier.put(new) == old.entry_id  # what it superseded, for the service to retire
    assert await tier.get(f"{TAG}xsame") == new


async def test_putting_the_same_entry_again_supersedes_nothing(tier: CacheTier) -> None:
    entry = make_entry("again")
    assert await tier.put(entry) is None
    assert await tier.put(replace(entry, ttl_s=60.0)) is None
    assert await tier.get(entry.exact_key) == replace(entry, ttl_s=60.0)


async def test_an_entry_sharing_only_a_lemma_key_supersedes_nothing(tier: CacheTier) -> None:
    first = make_entry("first", lemma_key=f"{TAG}lsame")
    second = make_entry("second", lemma_key=f"{TAG}lsame")
    await tier.put(first)
    assert await tier.put(second) is None
    assert await tier.get(first.exact_key) == first  # still its own question's answer


async def test_deleting_an_entry_leaves_a_shared_lemma_key_to_its_new_owner(
    tier: CacheTier,
) -> None:
    first = make_entry("one", lemma_key=f"{TAG}lshared")
    second = make_entry("two", lemma_key=f"{TAG}lshared")
    await tier.put(first)
    await tier.put(second)
    await tier.delete(first.entry_id)
    assert await tier.get(f"{TAG}lshared") == second


async def test_invalidate_by_tenant_namespace_and_model(tier: CacheTier) -> None:
    await tier.put(make_entry("a", tenant="t1"))
    await tier.put(make_entry("b", tenant="t1", namespace="docs"))
    await tier.put(make_entry("c", tenant="t2", model="other"))
    assert await tier.invalidate(Invalidation(tenant="t1", namespace="docs")) == 1
    assert await tier.invalidate(Invalidation(model="other")) == 1
    assert await tier.count() == 1
    assert await tier.invalidate(Invalidation()) == 1
    assert await tier.count() == 0


async def test_matching_lists_what_the_selector_names_across_partitions(tier: CacheTier) -> None:
    await tier.put(make_entry("a", tenant="t1"))
    await tier.put(make_entry("b", tenant="t1", namespace="docs"))
    await tier.put(make_entry("c", tenant="t2", model="other"))
    await tier.put(in_partition("cd" * 8, "d"))
    ids = sorted(e.entry_id for e in await tier.matching(Invalidation(tenant="t1")))
    assert ids == [f"{TAG}-a", f"{TAG}-b"]
    assert [e.entry_id for e in await tier.matching(Invalidation(model="other"))] == [f"{TAG}-c"]
    assert len(await tier.matching(Invalidation())) == 4
    assert all(e.vector is None for e in await tier.matching(Invalidation()))
    assert await tier.count() == 4  # listing deletes nothing


def in_partition(tag: str, name: str) -> Entry:
    """An entry of another partition (its keys and id under `tag`)."""
    return make_entry(
        name,
        entry_id=f"{tag}-{name}",
        partition=tag + "0" * 48,
        exact_key=f"{tag}x{name}",
        lemma_key=f"{tag}l{name}",
    )


async def test_count_and_invalidation_reach_every_partition(tier: CacheTier) -> None:
    # On a cluster the partitions' hash tags put them on different masters: counting and
    # invalidating must scan all of them, not the node the client happens to talk to.
    tags = [f"{i:02x}" * 8 for i in range(12)]
    for tag in tags:
        await tier.put(in_partition(tag, "q"))
        await tier.put(in_partition(tag, "r"))
    assert await tier.count() == 24
    assert await tier.invalidate(Invalidation(tenant="tenant-1")) == 24
    assert await tier.count() == 0
    for tag in tags:
        assert await tier.get(f"{tag}xq") is None
        assert await tier.get(f"{tag}lq") is None


async def test_entries_are_gone_after_ttl_plus_grace(tier: CacheTier) -> None:
    # Stored long enough ago that TTL + grace ends in 0.3 s.
    entry = make_entry("a", stored_at=time.time() - 360.0 + 0.3)
    await tier.put(entry)
    found = await tier.get(entry.exact_key)
    assert found is not None and not found.is_fresh(time.time())  # expired, still in grace
    await asyncio.sleep(0.5)
    assert await tier.get(entry.exact_key) is None
