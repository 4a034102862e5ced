"""Redis killed and restarted under traffic: requests keep being served, the tier comes back."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
import redis

from tests.conftest import ProxyFactory
from tests.support.redis_server import RedisServer
from tests.support.stub_upstream import StubUpstream
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis


def body(question: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}]}


async def ask(session: aiohttp.ClientSession, url: str, question: str) -> tuple[int, str]:
    async with session.post(url, json=body(question)) as response:
        await response.read()
        return response.status, response.headers.get("X-Deja-Cache", "")


def redis_entries(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return len(client.keys("deja:v1:*:e:*"))


def in_redis(url: str, entry_id: str) -> bool:
    with redis.Redis.from_url(url) as client:
        return bool(client.keys(f"deja:v1:*:e:{entry_id}"))


async def test_requests_survive_redis_dying_and_the_tier_reconnects(
    proxy_factory: ProxyFactory,
    stub: StubUpstream,
    redis_server: RedisServer,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="deja.redis")
    proxy = await proxy_factory(redis={"url": redis_url, "probe_interval_s": 0.1})
    url = proxy.url("/v1/chat/completions")
    statuses: list[int] = []
    stop = asyncio.Event()

    async with aiohttp.ClientSession() as session:

        async def traffic() -> None:
            n = 0
            while not stop.is_set():
                status, _ = await ask(session, url, f"background question {n % 5}")
                statuses.append(status)
                n += 1
                await asyncio.sleep(0.01)

        background = asyncio.create_task(traffic())
        async with session.post(url, json=body("before")) as response:
            await response.read()
            assert (response.status, response.headers["X-Deja-Cache"]) == (200, "miss")
            entry_id = response.headers["X-Deja-Entry"]
        # The answer is stored after it went out (background work that takes its turn
        # behind the other requests' stores), so wait for it rather than race it.
        await wait_until(lambda: in_redis(redis_url, entry_id))

        redis_server.stop()
        assert await ask(session, url, "before") == (200, "hit")  # from LRU-K
        assert await ask(session, url, "during") == (200, "miss")  # from the upstream
        await asyncio.sleep(0.3)

        redis_server.start()
        await wait_until(lambda: "reachable again" in caplog.text)
        assert await ask(session, url, "after") == (200, "miss")
        await wait_until(lambda: redis_entries(redis_url) >= 1)
        stop.set()
        await background

    assert statuses and set(statuses) == {200}
    warnings = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


async def test_the_proxy_starts_and_serves_while_redis_is_down(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    dead = RedisServer()  # never started: nothing listens on its port
    proxy = await proxy_factory(redis={"url": dead.url, "probe_interval_s": 0.1})
    async with aiohttp.ClientSession() as session:
        url = proxy.url("/v1/chat/completions")
        assert await ask(session, url, "q") == (200, "miss")
        assert await ask(session, url, "q") == (200, "hit")
        async with session.get(proxy.url("/readyz")) as response:
            report = await response.json()
        assert response.status == 200
        assert report["redis"] == {"configured": True, "available": False}
    dead.close()
