"""The Redis tier's record handling on a real server: one-round-trip lookups that survive a
flushed script cache, dangling index keys, and records that are not ours to serve."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import redis

from core.config import RedisConfig
from tests.contract.test_cache_tier import make_entry
from tiers.base import ENTRY_FORMAT_VERSION
from tiers.entry_codec import META
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier

pytestmark = pytest.mark.redis


@pytest.fixture
async def tier(redis_url: str) -> AsyncIterator[RedisTier]:
    config = RedisConfig(url=redis_url)
    connection = RedisConnection(config)
    await connection.start()
    yield RedisTier(connection, config)
    await connection.close()


async def test_a_lookup_survives_a_flushed_script_cache(tier: RedisTier, redis_url: str) -> None:
    entry = make_entry("a")
    await tier.put(entry)
    assert await tier.get(entry.exact_key) == entry
    # What a restarted server looks like to the client: the script is unknown again.
    redis.Redis.from_url(redis_url).script_flush()
    assert await tier.get(entry.lemma_key or "") == entry


async def test_an_index_key_whose_record_is_gone_misses(tier: RedisTier, redis_url: str) -> None:
    entry = make_entry("b")
    await tier.put(entry)
    client = redis.Redis.from_url(redis_url)
    (record_key,) = [k for k in client.keys("*") if b":e:" in k]
    client.delete(record_key)
    assert await tier.get(entry.exact_key) is None


async def test_a_record_of_another_format_version_is_not_served(
    tier: RedisTier, redis_url: str
) -> None:
    entry = make_entry("c")
    await tier.put(entry)
    client = redis.Redis.from_url(redis_url)
    (record_key,) = [k for k in client.keys("*") if b":e:" in k]
    meta = json.loads(client.hget(record_key, META) or b"{}")
    assert meta["v"] == ENTRY_FORMAT_VERSION
    client.hset(record_key, META, json.dumps({**meta, "v": ENTRY_FORMAT_VERSION + 1}))
    assert await tier.get(entry.exact_key) is None
    assert await tier.get_by_id(entry.entry_id) is None
