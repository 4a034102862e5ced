"""The Redis tier's record handling on a real server and on a real Redis Cluster: one-round-trip
lookups that survive a flushed script cache, dangling index keys, records that are not ours to
serve, and a lemma key dropped from its entry."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
import redis

from core.clock import SystemClock
from core.config import RedisConfig
from core.recorder import CacheRecorder
from normalize.keys.request import CacheRequest, Route
from normalize.meaning.signature import Analysis, MeaningSignature
from normalize.prompt_features import PromptAnalysis, SemanticSkip
from tests.contract.test_cache_tier import TAG, make_entry
from tiers.base import ENTRY_FORMAT_VERSION, MatchKind
from tiers.entry_codec import META
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.service import CacheService

pytestmark = pytest.mark.redis


@dataclass
class Server:
    """The tier's server seen two ways: the tier, and a plain client to tamper with records."""

    tier: RedisTier
    raw: Any  # redis.Redis or redis.RedisCluster (SCAN and SCRIPT FLUSH reach every master)

    def record_keys(self) -> list[bytes]:
        return [k for k in self.raw.scan_iter("*") if b":e:" in k]


@pytest.fixture(params=["redis", "redis_cluster"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[Server]:
    cluster = request.param == "redis_cluster"
    url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    config = RedisConfig(url=url, cluster=cluster)
    connection = RedisConnection(config)
    await connection.start()
    raw = redis.RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url)
    yield Server(RedisTier(connection, config), raw)
    raw.close()
    await connection.close()


@pytest.fixture
def tier(server: Server) -> RedisTier:
    return server.tier


async def test_a_lookup_survives_a_flushed_script_cache(tier: RedisTier, server: Server) -> None:
    entry = make_entry("a")
    await tier.put(entry)
    assert await tier.get(entry.exact_key) == entry
    # What a restarted server looks like to the client: the script is unknown again.
    server.raw.script_flush()
    assert await tier.get(entry.lemma_key or "") == entry


async def test_an_index_key_whose_record_is_gone_misses(tier: RedisTier, server: Server) -> None:
    entry = make_entry("b")
    await tier.put(entry)
    (record_key,) = server.record_keys()
    server.raw.delete(record_key)
    assert await tier.get(entry.exact_key) is None


async def test_a_record_of_another_format_version_is_not_served(
    tier: RedisTier, server: Server
) -> None:
    entry = make_entry("c")
    await tier.put(entry)
    client = server.raw
    (record_key,) = server.record_keys()
    meta = json.loads(client.hget(record_key, META) or b"{}")
    assert meta["v"] == ENTRY_FORMAT_VERSION
    client.hset(record_key, META, json.dumps({**meta, "v": ENTRY_FORMAT_VERSION + 1}))
    assert await tier.get(entry.exact_key) is None
    assert await tier.get_by_id(entry.entry_id) is None


async def test_an_answer_vector_attached_later_keeps_the_prompt_vector(tier: RedisTier) -> None:
    # A `replace` of an entry read back (feedback, a verified threshold): the entry read back has
    # no vectors (a hit never needs them), and replacing with it must not drop the stored one.
    prompt, answer = b"\x01\x00" * 384, b"\x02\x00" * 384
    await tier.put(make_entry("d", vector=prompt))
    read_back = await tier.get_by_id(make_entry("d").entry_id)
    assert read_back is not None and read_back.vector is None
    assert await tier.replace(replace(read_back, answer_vector=answer))
    full = await tier.get_full(read_back.entry_id)
    assert full is not None and (full.vector, full.answer_vector) == (prompt, answer)


class LemmaKeyed:
    """A prompt whose lemma key is `key`, its embedding ready."""

    def __init__(self, key: str) -> None:
        self._key = key

    async def analysis(self) -> PromptAnalysis | None:
        analysis = Analysis(("reset", "pin"), MeaningSignature())
        return PromptAnalysis(analysis, self._key, analysis.to_wire())

    async def vector(self) -> np.ndarray | None:
        return self.vector_if_ready()

    def vector_if_ready(self) -> np.ndarray | None:
        return np.asarray([1.0, 0.0], dtype=np.float32)

    async def rescore_vector(self) -> np.ndarray | None:
        return None  # one-stage mode

    def semantic_allowed(self) -> bool:
        return True

    def skip_reason(self) -> SemanticSkip | None:
        return None


async def test_a_dropped_lemma_key_no_longer_finds_its_entry(tier: RedisTier) -> None:
    service = CacheService([tier], SystemClock(), CacheRecorder())
    entry = make_entry("d")
    assert entry.lemma_key is not None
    await service.store(entry)
    twin = CacheRequest(
        Route.CHAT, "tenant-1", "", "m", entry.partition, TAG + "twin", "twin", False, False
    )
    found = await service.lookup(twin, LemmaKeyed(entry.lemma_key))
    assert found.hit is not None and found.hit.match is MatchKind.LEMMA

    assert await service.drop_lemma_key(entry.entry_id)
    # Redis keeps the lemma index key until the entry expires; the record no longer claims it.
    assert await tier.get(entry.lemma_key) == replace(entry, lemma_key=None)
    assert (await service.lookup(twin, LemmaKeyed(entry.lemma_key))).hit is None
    assert await tier.get(entry.exact_key) == replace(entry, lemma_key=None)


async def test_a_partition_hash_lists_its_live_entries_for_a_load(
    tier: RedisTier, server: Server
) -> None:
    """What a replica loading a partition reads (tiers/partition_loader.py): the partition's
    own hash, which follows stores, deletions and expiry, in the partition's slot."""
    now = time.time()
    for name, ttl_s in (("kept", 300.0), ("deleted", 300.0), ("expired", 1.0)):
        await tier.put(make_entry(name, stored_at=now, ttl_s=ttl_s, grace_s=0.0))
    await tier.delete(f"{TAG}-deleted")
    key = f"deja:v1:{{{TAG}}}:p"
    fields = {k.decode() for k in server.raw.hkeys(key)}
    assert fields == {f"{TAG}-kept", f"{TAG}-expired", "~max", "~cur"}
    # The hash lives as long as its longest-lived entry.
    assert 299_000 < server.raw.pttl(key) <= 300_000
    loaded = [e.entry_id async for e in tier.partition_entries(TAG, now + 2.0)]
    assert loaded == [f"{TAG}-kept"]  # the expired one is skipped without being read
    # ... and pruned: the hash would otherwise keep every id its partition ever had.
    assert {k.decode() for k in server.raw.hkeys(key)} == {f"{TAG}-kept", "~max", "~cur"}
    other = "f" * 16
    assert [e async for e in tier.partition_entries(other, now)] == []


async def test_stores_prune_the_ids_that_expired_from_their_partitions_hash(
    tier: RedisTier, server: Server
) -> None:
    """A partition that keeps being stored to never expires as a whole, and no replica may
    ever load it again: its own stores drop the ids whose entries expired, a few fields each
    (tiers/redis_tier.py), or its hash would keep every id it ever had."""
    now = time.time()
    await tier.put(make_entry("anchor", stored_at=now, ttl_s=300.0, grace_s=0.0))
    # Entries that expired long ago (Redis drops their records at once); their ids stay in the
    # hash, which lives on with the anchor. More than a small hash holds, so that each store
    # visits only some of them.
    for n in range(300):
        await tier.put(make_entry(f"old{n}", stored_at=now - 100.0, ttl_s=1.0, grace_s=0.0))
    key = f"deja:v1:{{{TAG}}}:p"
    assert len(server.raw.hkeys(key)) >= 300
    live = {f"{TAG}-anchor"}
    # A pass over the hash visits every field, about ten a store: two passes at most.
    for n in range(250):
        await tier.put(make_entry(f"new{n}", stored_at=now, ttl_s=300.0, grace_s=0.0))
        live.add(f"{TAG}-new{n}")
    fields = {k.decode() for k in server.raw.hkeys(key)}
    assert fields == live | {"~max", "~cur"}
    assert 299_000 < server.raw.pttl(key) <= 300_000


async def test_an_entry_stored_past_its_expiry_leaves_no_hash_behind(
    tier: RedisTier, server: Server
) -> None:
    other = "e" * 16
    entry = make_entry(
        "late",
        entry_id=f"{other}-late",
        partition=other + "0" * 48,
        exact_key=f"{other}xlate",
        lemma_key=None,
        stored_at=time.time() - 100.0,
        ttl_s=1.0,
        grace_s=0.0,
    )
    await tier.put(entry)
    assert server.raw.exists(f"deja:v1:{{{other}}}:p") == 0
    assert await tier.get(entry.exact_key) is None
