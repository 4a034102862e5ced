"""One miss through the whole proxy (create_app, real Redis, real MiniLM and spaCy, FAISS) is
written once: one entry record in Redis, carrying the answer's embedding, one vector in the
semantic index, and one event on the replication stream.

Until the answer embedding was written with the entry, every semantic miss wrote its record
twice (the entry, then the entry again with its answer vector) and published two events (add,
then update), so every other replica loaded it twice. Redis counts the writes: an entry record
is written with exactly one PEXPIREAT (tiers/redis_tier.py, `put` and `replace` alike), and
nothing else sends that command.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import redis

from proxy.composition.app import PARTS
from tests.conftest import ProxyFactory
from tests.support.waiting import wait_until
from tiers.entry_codec import ANSWER_VECTOR, VECTOR

pytestmark = [pytest.mark.redis, pytest.mark.models]

QUESTION = {
    "model": "m",
    "messages": [{"role": "user", "content": "How do I reset my online banking PIN?"}],
}


def calls(client: redis.Redis, command: str) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_a_semantic_miss_is_one_record_one_vector_and_one_event(
    proxy_factory: ProxyFactory, redis_url: str
) -> None:
    proxy = await proxy_factory(redis={"url": redis_url}, semantic={"enabled": True})
    parts = proxy.app[PARTS]
    readiness, store = parts.readiness, parts.store
    await wait_until(lambda: readiness.ready or readiness.error, timeout_s=300)
    assert readiness.error is None
    assert store.semantic is not None
    with redis.Redis.from_url(redis_url) as client:
        client.config_resetstat()
        events = f"{parts.config.redis.key_prefix}:events"

        async with aiohttp.ClientSession() as session:
            url = proxy.url("/v1/chat/completions")
            async with session.post(url, json=QUESTION) as response:
                assert response.headers["X-Deja-Cache"] == "miss"
                entry_id = response.headers["X-Deja-Entry"]
                await response.read()
        await wait_until(lambda: store.service.answer_vector(entry_id) is not None, timeout_s=30)
        await asyncio.sleep(0.2)  # room for a second write, were there one

        # The record's expiry and its partition's hash of entry ids (which expires with the
        # last of its entries), both in the one store script.
        assert calls(client, "pexpireat") == 2
        assert calls(client, "xadd") == 1
        ((_, fields),) = client.xrange(events)
        assert (fields[b"kind"], fields[b"entry_id"]) == (b"add", entry_id.encode())
        (record,) = [k for k in client.keys("*") if k.endswith(f":e:{entry_id}".encode())]
        assert client.hexists(record, VECTOR) and client.hexists(record, ANSWER_VECTOR)
        assert store.recorder.snapshot().stores == 1
        assert store.semantic.size() == 1
