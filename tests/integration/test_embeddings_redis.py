"""Embeddings in the shared tier: a vector stored by one proxy is served by another from a real
Redis, bit for bit, and an invalidation or a TTL cap applies to it as to a completion."""

from __future__ import annotations

import aiohttp
import numpy as np
from openai import AsyncOpenAI

from core.clock import ManualClock
from tests.conftest import ProxyFactory
from tests.support.stub_embeddings import stub_vector
from tests.support.stub_upstream import StubUpstream

MODEL = "text-embedding-3-large"


def client_for(base_url: str, key: str = "sk-test") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)


async def test_another_proxy_serves_the_vectors_from_redis(
    proxy_factory: ProxyFactory, stub: StubUpstream, redis_url: str
) -> None:
    sections = {"redis": {"url": redis_url}}
    texts = [f"input {i}" for i in range(10)]
    first = await proxy_factory(**sections)
    async with client_for(first.base_url) as client:
        await client.embeddings.create(model=MODEL, input=texts[:6], dimensions=16)
    second = await proxy_factory(**sections)
    async with client_for(second.base_url) as client:
        raw = await client.embeddings.with_raw_response.create(
            model=MODEL, input=texts, dimensions=16, encoding_format="float"
        )
    assert raw.headers["X-Deja-Cache"] == "partial"
    assert raw.headers["X-Deja-Inputs-Cached"] == "6/10"
    assert stub.embedding_calls == [texts[:6], texts[6:]]
    got = np.asarray([d.embedding for d in raw.parse().data], dtype=np.float32)
    assert np.array_equal(got, np.stack([stub_vector(MODEL, t, 16) for t in texts]))


async def test_the_store_ttl_cap_and_an_invalidation_apply(
    proxy_factory: ProxyFactory, stub: StubUpstream, redis_url: str
) -> None:
    clock = ManualClock()
    proxy = await proxy_factory(
        clock=clock, redis={"url": redis_url}, admin={"token": "admin-secret"}
    )
    async with client_for(proxy.base_url) as client:
        await client.embeddings.create(
            model=MODEL, input=["a", "b"], extra_headers={"X-Deja-Store-TTL": "60"}
        )
        await client.embeddings.create(model=MODEL, input=["c", "d"])
        hit = await client.embeddings.with_raw_response.create(model=MODEL, input=["a", "c"])
        clock.advance(61)
        capped = await client.embeddings.with_raw_response.create(model=MODEL, input=["a", "c"])
    assert hit.headers["X-Deja-Inputs-Cached"] == "2/2"
    assert capped.headers["X-Deja-Inputs-Cached"] == "1/2"  # "a" expired at its 60 s cap
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            proxy.url("/admin/v1/invalidate"),
            json={"model": MODEL},
            headers={"Authorization": "Bearer admin-secret"},
        ) as reply,
    ):
        assert reply.status == 200
        assert (await reply.json())["invalidated"] == 4
    async with client_for(proxy.base_url) as client:
        after = await client.embeddings.with_raw_response.create(model=MODEL, input=["b", "c"])
    assert after.headers["X-Deja-Cache"] == "miss"


async def test_a_batch_larger_than_the_redis_pool_is_stored_and_found_in_redis(
    proxy_factory: ProxyFactory, stub: StubUpstream, redis_url: str
) -> None:
    # redis-py's pool holds 100 connections: a batch must not ask for one per input at once
    # (past the pool a call fails, and Deja would take Redis for down).
    texts = [f"pool test {i}" for i in range(300)]
    first = await proxy_factory(redis={"url": redis_url})
    async with client_for(first.base_url) as client:
        await client.embeddings.create(model=MODEL, input=texts)
    second = await proxy_factory(redis={"url": redis_url})
    async with client_for(second.base_url) as client:
        raw = await client.embeddings.with_raw_response.create(model=MODEL, input=texts)
    assert raw.headers["X-Deja-Inputs-Cached"] == "300/300"
    assert len(stub.embedding_calls) == 1
