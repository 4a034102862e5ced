"""Identical misses share one upstream call; it is cancelled only when its last waiter leaves."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from tests.conftest import ProxyFactory
from tests.support.stub_upstream import Behaviour, StubUpstream

CHAT = "/v1/chat/completions"


def chat(stream: bool, question: str = "Tell me a story") -> dict[str, Any]:
    return {"model": "m", "stream": stream, "messages": [{"role": "user", "content": question}]}


def text_of(raw: bytes, stream: bool) -> str:
    if not stream:
        return str(json.loads(raw)["choices"][0]["message"]["content"])
    parts = []
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            if chunk["choices"]:
                parts.append(chunk["choices"][0]["delta"].get("content") or "")
    assert raw.decode().rstrip().endswith("data: [DONE]")
    return "".join(parts)


async def test_concurrent_identical_misses_make_one_upstream_call(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(
        answer=lambda b: "once upon a time there was a cache", chunk_delay_s=0.05
    )
    proxy = await proxy_factory()

    async def one(session: aiohttp.ClientSession, stream: bool) -> tuple[str, str | None, str]:
        async with session.post(proxy.url(CHAT), json=chat(stream)) as response:
            raw = await response.read()
            return (
                text_of(raw, stream),
                response.headers.get("X-Deja-Coalesced"),
                response.headers["X-Deja-Cache"],
            )

    async with aiohttp.ClientSession() as session:
        leader = asyncio.create_task(one(session, True))
        await asyncio.sleep(0.1)  # the leader's call is in flight, mid-stream
        followers = await asyncio.gather(*(one(session, i % 2 == 0) for i in range(9)))
        results = [await leader, *followers]
    assert stub.completion_calls() == 1
    assert {text for text, _, _ in results} == {"once upon a time there was a cache"}
    assert [coalesced for _, coalesced, _ in results].count("1") == 9
    assert {cache for _, _, cache in results} == {"miss"}


async def test_the_call_is_cancelled_when_its_only_waiter_leaves(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(answer=lambda b: "a b c d e f g h i j", chunk_delay_s=0.2)
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as session:
        async with session.post(proxy.url(CHAT), json=chat(True)) as response:
            await response.content.readline()  # the first bytes arrive, then the client leaves
        await asyncio.sleep(0.5)
        assert stub.cancelled == 1 and stub.active == 0
        stub.behaviour = Behaviour(answer=lambda b: "fresh")
        async with session.post(proxy.url(CHAT), json=chat(False)) as response:
            assert response.headers["X-Deja-Cache"] == "miss"  # nothing half-written was stored
            assert text_of(await response.read(), False) == "fresh"


async def test_a_waiter_leaving_does_not_cancel_the_others(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(answer=lambda b: "a b c d e", chunk_delay_s=0.1)
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as session:

        async def quitter() -> None:
            async with session.post(proxy.url(CHAT), json=chat(True)) as response:
                await response.content.readline()

        async def stayer() -> str:
            async with session.post(proxy.url(CHAT), json=chat(False)) as response:
                return text_of(await response.read(), False)

        stay = asyncio.create_task(stayer())
        await asyncio.sleep(0.05)
        await quitter()
        assert await stay == "a b c d e"
        async with session.post(proxy.url(CHAT), json=chat(False)) as response:
            assert response.headers["X-Deja-Cache"] == "hit"
    assert stub.completion_calls() == 1 and stub.cancelled == 0


async def test_no_cache_requests_get_their_own_call(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(delay_s=0.2)
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as session:

        async def one(headers: dict[str, str]) -> None:
            async with session.post(proxy.url(CHAT), json=chat(False), headers=headers) as response:
                await response.read()

        await asyncio.gather(one({}), one({"Cache-Control": "no-cache"}))
    assert stub.completion_calls() == 2
