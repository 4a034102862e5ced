"""Answers cut at max_tokens (`finish_reason: length`) are stored and served as they came, unless
`cache.store_truncated` is off; content_filter answers and streams that broke off never are.
The same rule holds for a miss's answer, a warm-up line and a verification's fresh answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from normalize.keys.fingerprint import fingerprint
from normalize.keys.request import Route
from normalize.prompt_features import NoFeatureSource
from proxy.answering.flight_call import UpstreamCaller
from proxy.answering.gate import UpstreamGate
from proxy.answering.store_rule import StoreRule
from proxy.composition.app import DEJA
from proxy.protocol.credentials import CredentialRule
from tests.admin.conftest import TOKEN, Client, admin_sections
from tests.conftest import ProxyFactory, RunningProxy
from tests.support.stub_upstream import Behaviour, StubUpstream

QUESTION = "Tell me everything about tea."


@dataclass(frozen=True)
class Answer:
    cache: str
    finish_reason: str | None
    text: str
    entry_id: str | None = None


async def ask(client: Client, stream: bool, **extra: Any) -> Answer:
    """One ask, streamed or not."""
    body = {"model": "m", "messages": [{"role": "user", "content": QUESTION}], **extra}
    async with client.session.post(
        client.proxy.url("/v1/chat/completions"), json=body | {"stream": stream}
    ) as response:
        assert response.status == 200
        raw = await response.read()
        cache = response.headers["X-Deja-Cache"]
        entry_id = response.headers.get("X-Deja-Entry")
    if not stream:
        choice = json.loads(raw)["choices"][0]
        return Answer(cache, choice["finish_reason"], choice["message"]["content"], entry_id)
    chunks = [json.loads(line[6:]) for line in raw.decode().splitlines() if line[6:7] == "{"]
    choices = [c["choices"][0] for c in chunks if c.get("choices")]
    text = "".join(c["delta"].get("content") or "" for c in choices)
    return Answer(cache, choices[-1]["finish_reason"], text, entry_id)


async def stored(client: Client, entry_id: str, timeout_s: float = 2.0) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if (await client.admin("GET", f"entries/{entry_id}")).status == 200:
            return True
        await asyncio.sleep(0.02)
    return False


async def not_stored(client: Client, reason: str, count: int) -> int:
    """`not_stored[reason]`, once it reaches `count` (counted just after the answer went out)
    or after a second."""
    deadline = asyncio.get_running_loop().time() + 1.0
    while True:
        seen = int((await client.admin("GET", "stats")).body["not_stored"].get(reason, 0))
        if seen >= count or asyncio.get_running_loop().time() > deadline:
            return seen
        await asyncio.sleep(0.02)


async def proxy_with(factory: ProxyFactory, store_truncated: bool | None = None) -> Client:
    cache = {} if store_truncated is None else {"store_truncated": store_truncated}
    proxy = await factory(**admin_sections(cache=cache))
    return Client(aiohttp.ClientSession(), proxy)


@pytest.fixture
async def sessions() -> AsyncIterator[list[Client]]:
    clients: list[Client] = []
    yield clients
    for client in clients:
        await client.session.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
async def test_a_truncated_answer_is_stored_and_its_repeat_hits_with_length_kept(
    proxy_factory: ProxyFactory, stub: StubUpstream, sessions: list[Client], stream: bool
) -> None:
    stub.behaviour = Behaviour(finish_reason="length")
    client = await proxy_with(proxy_factory)
    sessions.append(client)

    first = await ask(client, stream, max_tokens=5)
    assert first.entry_id is not None and await stored(client, first.entry_id)
    repeats = [await ask(client, repeat_stream, max_tokens=5) for repeat_stream in (False, True)]
    other_limit = await ask(client, stream, max_tokens=6)

    assert (first.cache, first.finish_reason) == ("miss", "length")
    assert first.text == f"Answer to: {QUESTION}"
    for repeat in repeats:
        assert (repeat.cache, repeat.finish_reason, repeat.text) == ("hit", "length", first.text)
    # max_tokens is part of the key: another limit is another request.
    assert other_limit.cache == "miss"
    assert stub.completion_calls() == 2
    assert await not_stored(client, "length", 1) == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
async def test_with_store_truncated_off_a_truncated_answer_is_not_stored(
    proxy_factory: ProxyFactory, stub: StubUpstream, sessions: list[Client], stream: bool
) -> None:
    stub.behaviour = Behaviour(finish_reason="length")
    client = await proxy_with(proxy_factory, store_truncated=False)
    sessions.append(client)

    caches = [(await ask(client, stream)).cache for _ in range(2)]

    assert caches == ["miss", "miss"]
    assert stub.completion_calls() == 2
    assert await not_stored(client, "length", 2) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
async def test_a_filtered_answer_is_never_stored(
    proxy_factory: ProxyFactory, stub: StubUpstream, sessions: list[Client], stream: bool
) -> None:
    stub.behaviour = Behaviour(finish_reason="content_filter")
    client = await proxy_with(proxy_factory, store_truncated=True)
    sessions.append(client)

    caches = [(await ask(client, stream)).cache for _ in range(2)]

    assert caches == ["miss", "miss"]
    assert await not_stored(client, "content_filter", 2) == 2


def length_chunks(done: bool) -> bytes:
    """A streamed answer that finished with `length`, then ([DONE] or) nothing: the upstream
    went away before the terminal event."""
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas = [({"role": "assistant", "content": "Half an"}, None), ({}, "length")]
    events = [
        {**base, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": f}]}
        for d, f in deltas
    ]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


@pytest.fixture
async def broken_upstream() -> AsyncIterator[str]:
    """An upstream whose streams end after the finish chunk without [DONE]."""

    async def chat(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(length_chunks(done=False))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    yield str(server.make_url("/v1"))
    await server.close()


async def test_a_stream_that_broke_off_after_a_length_finish_is_never_stored(
    proxy_factory: ProxyFactory, broken_upstream: str, sessions: list[Client]
) -> None:
    proxy = await proxy_factory(
        **admin_sections(upstream={"url": broken_upstream, "max_retries": 0})
    )
    client = Client(aiohttp.ClientSession(), proxy)
    sessions.append(client)

    caches = [(await ask(client, True)).cache for _ in range(2)]

    assert caches == ["miss", "miss"]
    assert await not_stored(client, "incomplete", 2) == 2


async def test_an_error_event_after_a_length_finish_is_never_stored(
    proxy_factory: ProxyFactory, stub: StubUpstream, sessions: list[Client]
) -> None:
    error = json.dumps({"error": {"message": "overloaded", "type": "server_error"}})
    stub.behaviour = Behaviour(finish_reason="length", inject_event=(2, error))
    client = await proxy_with(proxy_factory)
    sessions.append(client)

    caches = [(await ask(client, True)).cache for _ in range(2)]

    assert caches == ["miss", "miss"]
    assert await not_stored(client, "incomplete", 2) == 2


def warm_up_body(finish_reason: str) -> bytes:
    request = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
    response = {
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Half an ans"},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    return orjson.dumps({"request": request, "response": response}) + b"\n"


async def warm(client: Client, body: bytes) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"}
    async with client.session.post(
        client.proxy.url("/admin/v1/warmup"), data=body, headers=headers
    ) as response:
        assert response.status == 200
        lines = [orjson.loads(raw) async for raw in response.content if raw.strip()]
    return dict(lines[0])


@pytest.mark.parametrize(
    ("store_truncated", "finish_reason", "stored"),
    [
        (None, "length", True),
        (False, "length", False),
        (True, "content_filter", False),
    ],
)
async def test_warm_up_lines_follow_the_same_rule(
    proxy_factory: ProxyFactory,
    stub: StubUpstream,
    sessions: list[Client],
    store_truncated: bool | None,
    finish_reason: str,
    stored: bool,
) -> None:
    client = await proxy_with(proxy_factory, store_truncated)
    sessions.append(client)

    result = await warm(client, warm_up_body(finish_reason))
    repeat = await client.ask(QUESTION)

    assert ("entry_id" in result) is stored
    if not stored:
        assert finish_reason in result["error"]
    assert repeat.headers["X-Deja-Cache"] == ("hit" if stored else "miss")
    if stored:
        assert repeat.body["choices"][0]["finish_reason"] == "length"


def caller_of(proxy: RunningProxy, rule: StoreRule) -> UpstreamCaller:
    """An UpstreamCaller over the proxy's own parts, as create_app builds the one behind both
    misses and verification."""
    deja = proxy.app[DEJA]
    gate = UpstreamGate(deja.upstream, deja.breaker, deja.admission)
    return UpstreamCaller(gate, deja.service, deja.entries, deja.stats, rule)


@pytest.mark.parametrize(
    ("rule", "finish_reason", "stored"),
    [
        (StoreRule(), "length", True),
        (StoreRule(store_truncated=False), "length", False),
        (StoreRule(), "content_filter", False),
        (StoreRule(), "stop", True),
    ],
)
async def test_a_verifications_fresh_answer_follows_the_same_rule(
    proxy_factory: ProxyFactory,
    sessions: list[Client],
    rule: StoreRule,
    finish_reason: str,
    stored: bool,
) -> None:
    proxy = await proxy_factory(**admin_sections())
    client = Client(aiohttp.ClientSession(), proxy)
    sessions.append(client)
    config = proxy.app[DEJA].config
    anonymous = CredentialRule(config.proxy, config.cache).tenant(())  # the ask below has none
    body = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
    request = fingerprint(Route.CHAT, body, anonymous, "")
    fresh = orjson.loads(warm_up_body(finish_reason))["response"]

    kept = await caller_of(proxy, rule).store_answer(
        f"{request.tag}-fresh", request, NoFeatureSource().for_request(request, False), fresh
    )

    assert kept is stored
    assert (await client.ask(QUESTION)).headers["X-Deja-Cache"] == ("hit" if stored else "miss")
