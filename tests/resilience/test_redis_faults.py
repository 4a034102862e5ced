"""Redis and degraded answers: expired entries are kept for the grace period (Redis TTL = entry
TTL + grace) and served stale from Redis; Redis killed under traffic costs no answer, and
nothing half-written lands in it (a second proxy reading only Redis finds whole answers)."""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest
import redis

from tests.conftest import ProxyFactory
from tests.resilience.client import Reply, ask
from tests.support.redis_server import RedisServer
from tests.support.stub_upstream import Behaviour, StubUpstream
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis


async def until_ready(session: aiohttp.ClientSession, url: str) -> None:
    # Also keeps the test from closing a proxy while it is still connecting to Redis.
    for _ in range(100):
        async with session.get(url + "/readyz") as response:
            if response.status == 200:
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the proxy did not become ready")


def answer_to(question: str) -> str:
    return f"Answer to: {question}"


async def test_redis_keeps_expired_entries_for_the_grace_period_and_serves_them_stale(
    proxy_factory: ProxyFactory, stub: StubUpstream, redis_url: str
) -> None:
    proxy = await proxy_factory(
        redis={"url": redis_url},
        lru_k={"enabled": False},  # Redis alone: what it keeps is what can be served
        ttl={"base_ttl_s": 1, "jitter_min": 1, "jitter_max": 1},
        degrade={"stale_grace_s": 30},
        upstream={"max_retries": 0},
    )
    url = f"http://127.0.0.1:{proxy.server.port}"
    async with aiohttp.ClientSession() as s:
        original = await ask(s, url, "What is the capital of Peru?")
        with redis.Redis.from_url(redis_url) as client:

            def records() -> list[bytes]:
                return [key for key in client.keys("deja:v1:*") if b":events" not in key]

            # The answer is stored after it went out: wait for the store instead of racing it.
            await wait_until(lambda: len(records()) >= 3)
            ttls_ms = {key: client.pttl(key) for key in records()}
            # The entry record, its exact key, and its partition's hash of entry ids.
            assert len(ttls_ms) == 3
            assert all(29_000 < ttl <= 31_000 for ttl in ttls_ms.values()), ttls_ms
            await asyncio.sleep(1.1)
            stub.behaviour = Behaviour(status=502)
            stale = await ask(s, url, "What is the capital of Peru?", stream=True)
    assert (stale.cache, stale.degraded, stale.headers["X-Deja-Tier"]) == (
        "degraded",
        "stale",
        "redis",
    )
    assert stale.complete and stale.text == original.text


async def test_redis_killed_under_traffic_costs_no_answer_and_stores_nothing_broken(
    proxy_factory: ProxyFactory,
    stub: StubUpstream,
    redis_server: RedisServer,
    redis_url: str,
) -> None:
    stub.behaviour = Behaviour(chunk_delay_s=0.005)
    writer = await proxy_factory(redis={"url": redis_url, "probe_interval_s": 0.1})
    url = f"http://127.0.0.1:{writer.server.port}"
    replies: list[tuple[str, Reply]] = []
    stop = asyncio.Event()

    async def client(session: aiohttp.ClientSession, offset: int) -> None:
        for n in itertools.count(offset):
            if stop.is_set():
                return
            question = f"Question {n % 7}?" if n % 2 else f"New question {n}?"
            replies.append((question, await ask(session, url, question, stream=n % 3 == 0)))

    async with aiohttp.ClientSession() as s:
        clients = [asyncio.create_task(client(s, offset)) for offset in (0, 10_000)]
        await asyncio.sleep(0.3)
        redis_server.stop()  # SIGKILL, mid-traffic
        await asyncio.sleep(0.5)
        redis_server.start()
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*clients)

        for question, reply in replies:
            assert (reply.status, reply.complete) == (200, True), reply.raw
            assert reply.cache in ("hit", "miss") and reply.text == answer_to(question)

        # A proxy that reads only Redis: every entry there is whole.
        reader = await proxy_factory(
            redis={"url": redis_url},
            lru_k={"enabled": False},
            breaker={"enabled": False},
            upstream={"max_retries": 0},
        )
        reader_url = f"http://127.0.0.1:{reader.server.port}"
        await until_ready(s, reader_url)
        stub.behaviour = Behaviour(status=500)  # so only what Redis holds can answer
        asked = sorted({question for question, _ in replies})
        found = [await ask(s, reader_url, question) for question in asked]
    for question, reply in zip(asked, found, strict=True):
        if reply.status == 200:
            assert (reply.cache, reply.headers["X-Deja-Tier"]) == ("hit", "redis")
            assert reply.text == answer_to(question)
        else:
            assert (reply.status, reply.cache) == (500, "miss")  # never stored: lost in the outage
    # What was written once Redis was back is there.
    assert sum(r.status == 200 for r in found) >= len(asked) // 3
