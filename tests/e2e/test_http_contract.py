"""DESIGN.md's header and status-code table, request by request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from tests.conftest import ProxyFactory
from tests.support.stub_upstream import Behaviour, StubUpstream

CHAT = "/v1/chat/completions"


def chat(question: str = "What is 2+2?", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}], **extra}


async def post(
    session: aiohttp.ClientSession,
    url: str,
    payload: Any = None,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
) -> tuple[int, CIMultiDict[str], Any]:
    kwargs: dict[str, Any] = {"headers": headers or {}}
    if data is not None:
        kwargs["data"] = data
    else:
        kwargs["json"] = payload
    async with session.post(url, **kwargs) as response:
        raw = await response.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw.decode()
        return response.status, CIMultiDict(response.headers), parsed


def assert_error(status: int, body: Any, expected_status: int, error_type: str) -> None:
    assert status == expected_status, body
    assert set(body["error"]) >= {"message", "type", "code"}
    assert body["error"]["type"] == error_type


async def test_request_ids_are_echoed_or_made(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        _, headers, _ = await post(s, proxy.url(CHAT), chat(), {"X-Request-Id": "req-123"})
        assert headers["X-Request-Id"] == "req-123"
        _, headers, _ = await post(s, proxy.url(CHAT), chat())
        assert len(headers["X-Request-Id"]) == 32
        async with s.get(proxy.url("/healthz")) as response:
            assert response.headers["X-Request-Id"]


@pytest.mark.parametrize(
    "data,expected",
    [
        (b"{not json", 400),
        (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]', 400),  # truncated
        (b"[1, 2]", 400),
        (b'{"messages": [{"role": "user", "content": "hi"}]}', 400),  # no model
        (b'{"model": "m"}', 400),  # no messages
        (b'{"model": "m", "messages": []}', 400),
        (b'{"model": "m", "messages": [{"role": "wizard", "content": "hi"}]}', 400),
        (b'{"model": "m", "messages": [{"role": "user", "content": 42}]}', 400),
        (b'{"model": "m", "stream": "yes", "messages": [{"role": "user", "content": "hi"}]}', 400),
        (b'\xff\xfe{"model": "m"}', 400),  # not UTF-8
        (b"", 400),
    ],
)
async def test_bad_bodies_get_400_error_objects(
    proxy_factory: ProxyFactory, data: bytes, expected: int
) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        status, headers, body = await post(
            s, proxy.url(CHAT), data=data, headers={"Content-Type": "application/json"}
        )
    assert_error(status, body, expected, "invalid_request_error")
    assert headers["X-Deja-Cache"] == "bypass"


async def test_huge_bodies_get_413(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory(server={"max_body_bytes": 4096})
    async with aiohttp.ClientSession() as s:
        status, _, body = await post(s, proxy.url(CHAT), chat("x" * 10_000))
    assert_error(status, body, 413, "invalid_request_error")


async def test_wrong_method_is_405_and_unknown_route_is_404(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url(CHAT)) as response:
            assert_error(response.status, await response.json(), 405, "invalid_request_error")
        async with s.get(proxy.url("/nowhere")) as response:
            assert_error(response.status, await response.json(), 404, "invalid_request_error")


async def test_upstream_key_replacement_requires_client_keys(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory(
        upstream={"api_key": "sk-upstream"}, proxy={"api_keys": ["sk-client"]}
    )
    async with aiohttp.ClientSession() as s:
        status, _, body = await post(s, proxy.url(CHAT), chat())
        assert_error(status, body, 401, "authentication_error")
        status, _, body = await post(
            s, proxy.url(CHAT), chat(), {"Authorization": "Bearer sk-wrong"}
        )
        assert_error(status, body, 401, "authentication_error")
        async with s.get(proxy.url("/v1/models")) as response:
            assert response.status == 401
        status, _, _ = await post(s, proxy.url(CHAT), chat(), {"Authorization": "Bearer sk-client"})
        assert status == 200
    assert stub.headers_seen[-1]["Authorization"] == "Bearer sk-upstream"


async def test_client_authorization_is_forwarded_by_default(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        await post(s, proxy.url(CHAT), chat(), {"Authorization": "Bearer sk-own"})
    assert stub.headers_seen[-1]["Authorization"] == "Bearer sk-own"


async def test_tenants_never_share_entries(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        _, h1, _ = await post(s, proxy.url(CHAT), chat(), {"Authorization": "Bearer sk-a"})
        _, h2, _ = await post(s, proxy.url(CHAT), chat(), {"Authorization": "Bearer sk-b"})
        _, h3, _ = await post(s, proxy.url(CHAT), chat(), {"Authorization": "Bearer sk-a"})
        _, h4, _ = await post(
            s, proxy.url(CHAT), chat(), {"Authorization": "Bearer sk-a", "X-Deja-Namespace": "ns"}
        )
    assert [h["X-Deja-Cache"] for h in (h1, h2, h3, h4)] == ["miss", "miss", "hit", "miss"]


async def test_cache_control_directives(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    proxy = await proxy_factory()
    url = proxy.url(CHAT)
    async with aiohttp.ClientSession() as s:
        _, h, _ = await post(s, url, chat("a"), {"Cache-Control": "no-store"})
        assert h["X-Deja-Cache"] == "miss" and "X-Deja-Entry" not in h
        _, h, _ = await post(s, url, chat("a"))
        assert h["X-Deja-Cache"] == "miss"  # the no-store answer was not kept
        _, h, _ = await post(s, url, chat("a"), {"Cache-Control": "no-cache"})
        assert h["X-Deja-Cache"] == "bypass" and "X-Deja-Entry" in h
        _, h, _ = await post(s, url, chat("a"))
        assert h["X-Deja-Cache"] == "hit" and h["X-Deja-Entry"]
        await asyncio.sleep(1.1)
        _, h, _ = await post(s, url, chat("a"), {"Cache-Control": "max-age=1"})
        assert h["X-Deja-Cache"] == "miss"  # the stored answer is older than a second
        _, h, _ = await post(s, url, chat("a"), {"Cache-Control": "max-age=60"})
        assert h["X-Deja-Cache"] == "hit" and int(h["Age"]) <= 1
        status, _, body = await post(s, url, chat("a"), {"Cache-Control": "max-age=soon"})
        assert_error(status, body, 400, "invalid_request_error")
    assert stub.completion_calls() == 4


async def test_hits_carry_ttl_age_and_entry(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory(ttl={"base_ttl_s": 100, "jitter_min": 1, "jitter_max": 1})
    async with aiohttp.ClientSession() as s:
        _, miss, _ = await post(s, proxy.url(CHAT), chat())
        _, hit, _ = await post(s, proxy.url(CHAT), chat())
        await post(s, proxy.url(CHAT), chat("b"), {"X-Deja-Store-TTL": "7"})
        _, capped, _ = await post(s, proxy.url(CHAT), chat("b"))
    assert hit["X-Deja-TTL"] == "100" and hit["Age"] == "0"
    assert hit["X-Deja-Entry"] == miss["X-Deja-Entry"]
    assert "X-Deja-TTL" not in miss
    assert capped["X-Deja-TTL"] == "7"


async def test_passthrough_routes_bypass_the_cache(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url("/v1/models")) as response:
            assert response.status == 200
            assert response.headers["X-Deja-Cache"] == "bypass"
            assert (await response.json())["data"][0]["id"] == "stub-model"
        async with s.put(proxy.url("/v1/echo/files?purpose=x"), data=b"payload") as response:
            echoed = await response.json()
    assert echoed == {
        "method": "PUT",
        "path": "/v1/echo/files",
        "query": "purpose=x",
        "body": "payload",
        "authorization": None,
    }


@pytest.mark.parametrize("status", [400, 404, 422, 429, 500, 503])
async def test_upstream_errors_pass_through_and_are_never_cached(
    proxy_factory: ProxyFactory, stub: StubUpstream, status: int
) -> None:
    stub.behaviour = Behaviour(status=status)
    proxy = await proxy_factory(upstream={"max_retries": 0})
    async with aiohttp.ClientSession() as s:
        first = await post(s, proxy.url(CHAT), chat())
        second = await post(s, proxy.url(CHAT), chat())
    for got_status, headers, body in (first, second):
        assert got_status == status
        assert body["error"]["message"] == f"stub failure {status}"
        assert headers["X-Deja-Cache"] == "miss"
    assert stub.completion_calls() == 2


async def test_unreachable_upstream_is_502(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    proxy = await proxy_factory(upstream={"url": "http://127.0.0.1:9/v1", "max_retries": 0})
    async with aiohttp.ClientSession() as s:
        status, _, body = await post(s, proxy.url(CHAT), chat())
    assert_error(status, body, 502, "upstream_error")


async def test_slow_upstream_is_504(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    stub.behaviour = Behaviour(hang=True)
    proxy = await proxy_factory(upstream={"first_byte_timeout_s": 0.3, "max_retries": 0})
    async with aiohttp.ClientSession() as s:
        status, _, body = await post(s, proxy.url(CHAT), chat())
    assert_error(status, body, 504, "upstream_error")


async def test_filtered_answers_are_served_but_not_stored(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    # Answers cut at max_tokens are stored: tests/e2e/test_truncated_answers.py.
    stub.behaviour = Behaviour(finish_reason="content_filter")
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        for stream in (False, True):
            status, h, _ = await post(s, proxy.url(CHAT), chat(stream=stream))
            assert status == 200 and h["X-Deja-Cache"] == "miss"
    assert stub.completion_calls() == 2


async def test_a_stream_that_breaks_off_is_never_stored(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(answer=lambda b: "one two three four five six", drop_after_chunks=3)
    proxy = await proxy_factory(upstream={"max_retries": 0})
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url(CHAT), json=chat(stream=True)) as response:
            text = (await response.read()).decode()
        assert response.status == 200
        assert '"error"' in text and "[DONE]" not in text
        stub.behaviour = Behaviour()
        _, h, _ = await post(s, proxy.url(CHAT), chat())
    assert h["X-Deja-Cache"] == "miss"


async def test_completions_route_is_cached_exactly(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    url = proxy.url("/v1/completions")
    async with aiohttp.ClientSession() as s:
        _, h1, b1 = await post(s, url, {"model": "m", "prompt": "Once upon"})
        _, h2, b2 = await post(s, url, {"model": "m", "prompt": "Once upon"})
        _, h3, _ = await post(s, url, {"model": "m", "prompt": "Once  upon"})
        async with s.post(
            url, json={"model": "m", "prompt": "Once upon", "stream": True}
        ) as response:
            streamed = (await response.read()).decode()
            h4 = response.headers
    assert [h["X-Deja-Cache"] for h in (h1, h2, h3, h4)] == ["miss", "hit", "miss", "hit"]
    assert b1["choices"][0]["text"] == b2["choices"][0]["text"] == "Answer to: Once upon"
    assert b2["object"] == "text_completion" and b2["id"] != b1["id"]
    pieces = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert "".join(p["choices"][0]["text"] for p in pieces) == "Answer to: Once upon"


async def test_explain_says_why_on_misses_hits_and_bypasses(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory()  # the semantic tier off
    explain = {"X-Deja-Explain": "1"}
    async with aiohttp.ClientSession() as s:
        _, miss, _ = await post(s, proxy.url(CHAT), chat("e"), explain)
        _, hit, _ = await post(s, proxy.url(CHAT), chat("e"), explain)
        _, plain, _ = await post(s, proxy.url(CHAT), chat("e"))
        _, off, _ = await post(s, proxy.url(CHAT), chat("e"), {"X-Deja-Explain": "maybe"})
        bypass_headers = {**explain, "Cache-Control": "no-cache"}
        _, bypass, _ = await post(s, proxy.url(CHAT), chat("e"), bypass_headers)
        async with s.post(proxy.url(CHAT), json=chat("f", stream=True), headers=explain) as r:
            await r.read()
            streamed = r.headers
    assert (miss["X-Deja-Cache"], miss["X-Deja-Explain"]) == ("miss", "refused=semantic_off")
    assert (hit["X-Deja-Cache"], hit["X-Deja-Explain"]) == ("hit", "served=exact")
    assert "X-Deja-Explain" not in plain and "X-Deja-Explain" not in off
    assert (bypass["X-Deja-Cache"], bypass["X-Deja-Explain"]) == ("bypass", "refused=no_lookup")
    assert streamed["X-Deja-Explain"] == "refused=semantic_off"
