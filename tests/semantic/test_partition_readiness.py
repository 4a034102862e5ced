"""/readyz under partitions loaded on demand: real models, real Redis, a proxy built by
create_app. Ready once the models are in; a partition loading in the background does not make it
unready, and its body lists it until it is held.

A partition is made to load again, large, by the memory budget: with room for almost nothing,
asking in a second tenant's partition drops the first (the coldest), whose Redis records are
then multiplied; the next question there (an exact hit, served at once) starts its load.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import aiohttp
import pytest
import redis

from proxy.composition.app import PARTS
from tests.conftest import ProxyFactory
from tests.support.waiting import wait_until
from tiers.entry_codec import decode_fields, encode_fields

pytestmark = [pytest.mark.redis, pytest.mark.models]

# Under semantic.flat_max_entries: the loaded partition stays flat (no graph built meanwhile).
SEEDED = 10_000


async def ask(session: aiohttp.ClientSession, url: str, question: str, key: str) -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": question}]}
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(url, json=body, headers=headers) as response:
        assert response.status == 200
        await response.read()
        return response.headers["X-Deja-Entry"]


async def readyz(
    session: aiohttp.ClientSession, url: str, partition: str
) -> tuple[int, dict[str, Any]]:
    async with session.get(url, params={"partition": partition}) as response:
        return response.status, await response.json()


def multiply(redis_url: str, prefix: str, entry_id: str, copies: int) -> None:
    """`copies` more records in the entry's partition, each under an id and key of its own, and
    named in the partition's hash as a store names them (tiers/redis_tier.py)."""
    tag = entry_id[:16]
    with redis.Redis.from_url(redis_url) as client:
        original = decode_fields(client.hgetall(f"{prefix}:{{{tag}}}:e:{entry_id}"))
        expiry_ms = int(original.hard_expires_at * 1000)
        pipe = client.pipeline(transaction=False)
        for n in range(copies):
            copy = replace(original, entry_id=f"{tag}-seed{n}", exact_key=f"{tag}seed{n}")
            pipe.hset(f"{prefix}:{{{tag}}}:e:{copy.entry_id}", mapping=encode_fields(copy, 1 << 20))
            pipe.hset(f"{prefix}:{{{tag}}}:p", copy.entry_id, expiry_ms)
        pipe.execute()


async def test_ready_while_a_partition_loads_and_the_body_lists_it(
    proxy_factory: ProxyFactory, redis_url: str
) -> None:
    proxy = await proxy_factory(
        redis={"url": redis_url},
        semantic={"enabled": True, "max_memory_bytes": 1},
        lru_k={"enabled": False},
    )
    parts = proxy.app[PARTS]
    await wait_until(lambda: parts.readiness.ready or parts.readiness.error, timeout_s=300)
    loader = parts.store.partitions
    assert parts.readiness.error is None and loader is not None
    completions, health = proxy.url("/v1/chat/completions"), proxy.url("/readyz")
    async with aiohttp.ClientSession() as session:
        first = await ask(session, completions, "How do I reset my PIN?", "sk-first")
        tag = first[:16]
        status, body = await readyz(session, health, first)  # an entry id names its partition
        assert status == 200 and body["semantic"]["partitions"]["partition"]["tag"] == tag
        record = f"{parts.config.redis.key_prefix}:{{{tag}}}:e:{first}"
        with redis.Redis.from_url(redis_url) as client:
            await wait_until(lambda: client.exists(record))
        await wait_until(lambda: tag in loader.held())
        await ask(session, completions, "How do I close my account?", "sk-second")
        await wait_until(lambda: tag not in loader.held())  # dropped: the coldest, over budget
        multiply(redis_url, parts.config.redis.key_prefix, first, SEEDED)

        again = await ask(session, completions, "How do I reset my PIN?", "sk-first")
        assert again == first  # an exact hit, from Redis, while the partition loads again
        status, body = await readyz(session, health, tag)
        assert status == 200, body
        partitions = body["semantic"]["partitions"]
        assert body["status"] == "ready" and partitions["loading"] == [tag]
        assert partitions["partition"] == {"tag": tag, "state": "loading"}

        await wait_until(lambda: tag in loader.held(), timeout_s=60)
        status, body = await readyz(session, health, tag)
        partitions = body["semantic"]["partitions"]
        assert status == 200 and partitions["loading"] == [] and partitions["held"] == 1
        assert partitions["partition"] == {"tag": tag, "state": "held"}
        assert parts.store.semantic is not None
        assert parts.store.semantic.tag_size(tag) == SEEDED + 1
