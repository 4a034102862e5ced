"""Bad input through an in-process proxy: every case gets an OpenAI-style error with the status
of DESIGN.md's table, or a correct answer; never a 500, never a dropped connection.

The listed cases come first; a hypothesis property test then throws generated bodies (almost
right requests, arbitrary JSON, bytes that are not JSON) at both completion routes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ProxyFactory
from tests.resilience.client import CHAT, Reply, chat
from tests.resilience.fuzz import ROUTES, request_bodies
from tests.support.stub_upstream import StubUpstream

COMPLETIONS = "/v1/completions"
VALID = json.dumps(chat("What is the capital of Peru?")).encode()


async def send(
    session: aiohttp.ClientSession,
    url: str,
    data: bytes | AsyncIterator[bytes],
    headers: dict[str, str] | None = None,
) -> Reply:
    async with session.post(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    ) as response:
        return Reply(response.status, response.headers.copy(), await response.read())


def assert_answered_or_refused(reply: Reply, path: str) -> None:
    """A correct answer, or an OpenAI error object with a client-error status."""
    assert "X-Request-Id" in reply.headers and reply.cache is not None
    if reply.status == 200:
        assert reply.complete, reply.raw
        if not reply.streamed:
            body = reply.json()
            assert body["object"] == ("chat.completion" if path == CHAT else "text_completion")
            assert body["choices"][0]["finish_reason"] == "stop"
        return
    assert reply.status in (400, 413), (reply.status, reply.raw)
    error = reply.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    assert reply.cache == "bypass"


@pytest.fixture
async def url(proxy_factory: ProxyFactory) -> str:
    proxy = await proxy_factory(server={"max_body_bytes": 64 * 1024, "max_messages": 50})
    return f"http://127.0.0.1:{proxy.server.port}"


def nested(depth: int) -> bytes:
    return b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": ' + (
        b"[" * depth + b"]" * depth + b"}"
    )


def messages(count: int) -> bytes:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
             for i in range(count)]  # fmt: skip
    return json.dumps({"model": "m", "messages": turns}).encode()


USER = b'"messages": [{"role": "user", "content": "hi"}]'


def with_user(field: bytes) -> bytes:
    """A body with one user message and one more raw field, e.g. b'"n": 0'."""
    return b'{"model": "m", ' + field + b", " + USER + b"}"


def with_content(content: bytes) -> bytes:
    """A body whose one user message has this raw content bytes between quotes."""
    return b'{"model": "m", "messages": [{"role": "user", "content": "' + content + b'"}]}'


BAD_BODIES: list[tuple[str, bytes]] = [
    # malformed
    ("not-json", b"{not json"),
    ("single-quotes", b"{'model': 'm', 'messages': []}"),
    ("trailing-comma", b'{"model": "m", "messages": [],}'),
    ("nan", with_user(b'"n": NaN')),
    ("infinite-number", with_user(b'"n": 1e400')),
    ("nul-byte", b'{"model": "m"\x00}'),
    ("empty", b""),
    ("whitespace", b"   \n"),
    ("array", b"[1, 2]"),
    ("string", b'"hello"'),
    ("null", b"null"),
    # wrong types and values
    ("model-number", b'{"model": 5, ' + USER + b"}"),
    ("model-empty", b'{"model": "", ' + USER + b"}"),
    ("model-missing", b"{" + USER + b"}"),
    ("messages-string", b'{"model": "m", "messages": "hi"}'),
    ("messages-empty", b'{"model": "m", "messages": []}'),
    ("message-number", b'{"model": "m", "messages": [1]}'),
    ("role-unknown", b'{"model": "m", "messages": [{"role": "wizard", "content": "hi"}]}'),
    ("role-missing", b'{"model": "m", "messages": [{"content": "hi"}]}'),
    ("role-list", b'{"model": "m", "messages": [{"role": [], "content": null}]}'),
    ("role-object", b'{"model": "m", "messages": [{"role": {"a": 1}, "content": "hi"}]}'),
    ("content-object", b'{"model": "m", "messages": [{"role": "user", "content": {}}]}'),
    ("content-part-string", b'{"model": "m", "messages": [{"role": "user", "content": ["hi"]}]}'),
    ("stream-string", with_user(b'"stream": "yes"')),
    ("n-zero", with_user(b'"n": 0')),
    ("n-bool", with_user(b'"n": true')),
    ("n-huge", with_user(b'"n": 123456789012345678901234567890')),
    ("top-logprobs-float", with_user(b'"top_logprobs": 1.5')),
    ("stream-options-list", with_user(b'"stream_options": []')),
    # invalid UTF-8, in the document and inside a string
    ("utf8-garbage", b'\xff\xfe{"model": "m"}'),
    ("utf8-latin1", with_content(b"caf\xe9")),
    ("utf8-overlong", with_content(b"\xc0\xaf")),
    ("utf8-surrogate", with_content(b"\xed\xa0\x80")),
    ("escaped-lone-surrogate", with_content(b"\\ud800")),
    # structure
    ("deeply-nested", nested(5000)),
    ("too-many-messages", messages(51)),
]


@pytest.mark.parametrize("data", [b for _, b in BAD_BODIES], ids=[n for n, _ in BAD_BODIES])
async def test_bad_bodies_get_400_error_objects(url: str, data: bytes) -> None:
    async with aiohttp.ClientSession() as s:
        reply = await send(s, url + CHAT, data)
    assert_answered_or_refused(reply, CHAT)
    assert reply.status == 400


async def test_every_truncation_of_a_valid_body_is_refused(url: str, stub: StubUpstream) -> None:
    async with aiohttp.ClientSession() as s:
        for end in range(len(VALID)):
            reply = await send(s, url + CHAT, VALID[:end])
            assert reply.status == 400, (VALID[:end], reply.raw)
            assert_answered_or_refused(reply, CHAT)
    assert stub.completion_calls() == 0


@pytest.mark.parametrize(
    "path,data",
    [
        (COMPLETIONS, b'{"model": "m", "prompt": {}}'),
        (COMPLETIONS, b'{"model": "m", "prompt": []}'),
        (COMPLETIONS, b'{"model": "m", "prompt": [[1, "a"]]}'),
        (COMPLETIONS, b'{"model": "m", "prompt": [true]}'),
        (COMPLETIONS, b'{"model": "m", "prompt": "a", "logprobs": true}'),
        (COMPLETIONS, b'{"model": "m"}'),
    ],
)
async def test_bad_completions_bodies_get_400(url: str, path: str, data: bytes) -> None:
    async with aiohttp.ClientSession() as s:
        reply = await send(s, url + path, data)
    assert reply.status == 400
    assert_answered_or_refused(reply, path)


async def test_huge_bodies_get_413_declared_or_streamed(url: str, stub: StubUpstream) -> None:
    huge = json.dumps(chat("x" * 70_000)).encode()

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for start in range(0, len(huge), 8192):
            yield huge[start : start + 8192]

    async with aiohttp.ClientSession() as s:
        declared = await send(s, url + CHAT, huge)
        streamed = await send(s, url + CHAT, chunked())
        within = await send(s, url + CHAT, json.dumps(chat("x" * 60_000)).encode())
    for reply in (declared, streamed):
        assert reply.status == 413 and reply.json()["error"]["code"] == "request_too_large"
        assert_answered_or_refused(reply, CHAT)
    assert within.status == 200
    assert stub.completion_calls() == 1


async def test_enormous_message_lists_are_refused_at_the_limit(
    url: str, stub: StubUpstream
) -> None:
    async with aiohttp.ClientSession() as s:
        at_limit = await send(s, url + CHAT, messages(49))  # ends with a user turn
        over = await send(s, url + CHAT, messages(51))
    assert at_limit.status == 200 and at_limit.complete
    assert over.status == 400 and "limit is 50" in over.json()["error"]["message"]


async def test_unknown_fields_are_forwarded_and_keyed(url: str, stub: StubUpstream) -> None:
    async with aiohttp.ClientSession() as s:
        replies = [
            await send(s, url + CHAT, json.dumps(chat("hi", x_vendor=extra)).encode())
            for extra in ({"a": [1, 2]}, {"a": [1, 2]}, {"a": [1, 3]})
        ]
    assert [(r.status, r.cache) for r in replies] == [(200, "miss"), (200, "hit"), (200, "miss")]
    assert stub.calls[-1]["x_vendor"] == {"a": [1, 3]}


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Deja-Store-TTL": "soon"},
        {"X-Deja-Store-TTL": "-5"},
        {"Cache-Control": "max-age=soon"},
    ],
)
async def test_bad_cache_headers_get_400(url: str, headers: dict[str, str]) -> None:
    async with aiohttp.ClientSession() as s:
        reply = await send(s, url + CHAT, VALID, headers)
    assert reply.status == 400
    assert_answered_or_refused(reply, CHAT)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same examples on every run
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(path=st.sampled_from(ROUTES), data=request_bodies)
async def test_any_body_gets_an_answer_or_an_error_object(url: str, path: str, data: bytes) -> None:
    async with aiohttp.ClientSession() as s:
        reply = await send(s, url + path, data)
        assert_answered_or_refused(reply, path)
        # The proxy is still there for the next request: nothing it got killed it.
        async with s.get(url + "/healthz") as health:
            assert health.status == 200


def chat_body(*messages: dict[str, Any]) -> bytes:
    return json.dumps({"model": "m", "messages": list(messages)}).encode()


USER_HI = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}

# Each a turn missing what its role needs (OpenAI's API reference), and the parameter the 400
# must name: a lenient upstream would answer these, and the answer would be stored.
MISSING_FIELDS: list[tuple[str, bytes, str]] = [
    ("user-no-content", chat_body({"role": "user"}), "messages[0].content"),
    ("user-null-content", chat_body({"role": "user", "content": None}), "messages[0].content"),
    ("system-no-content", chat_body({"role": "system"}, USER_HI), "messages[0].content"),
    ("developer-no-content", chat_body({"role": "developer"}, USER_HI), "messages[0].content"),
    ("assistant-empty", chat_body(USER_HI, {"role": "assistant"}, USER_HI), "messages[1].content"),
    (
        "assistant-empty-tool-calls",
        chat_body(USER_HI, {"role": "assistant", "content": None, "tool_calls": []}, USER_HI),
        "messages[1].tool_calls",
    ),
    (
        "tool-no-call-id",
        chat_body(
            USER_HI, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "content": "1"}
        ),
        "messages[2].tool_call_id",
    ),
    (
        "tool-call-id-number",
        chat_body(USER_HI, {"role": "tool", "content": "1", "tool_call_id": 7}),
        "messages[1].tool_call_id",
    ),
    (
        "tool-no-content",
        chat_body(USER_HI, {"role": "tool", "tool_call_id": "c1"}),
        "messages[1].content",
    ),
    (
        "function-no-name",
        chat_body(USER_HI, {"role": "function", "content": "1"}),
        "messages[1].name",
    ),
    ("name-number", chat_body({"role": "user", "content": "hi", "name": 3}), "messages[0].name"),
    ("content-empty-array", chat_body({"role": "user", "content": []}), "messages[0].content"),
    (
        "text-part-no-text",
        chat_body({"role": "user", "content": [{"type": "text"}]}),
        "messages[0].content[0].text",
    ),
    ("role-missing", chat_body({"content": "hi"}), "messages[0].role"),
    ("model-missing", b"{" + USER + b"}", "model"),
    ("messages-missing", b'{"model": "m"}', "messages"),
]


@pytest.mark.parametrize(
    "data,param", [(b, p) for _, b, p in MISSING_FIELDS], ids=[n for n, _, _ in MISSING_FIELDS]
)
async def test_turns_missing_a_required_field_get_400_naming_it(
    url: str, stub: StubUpstream, data: bytes, param: str
) -> None:
    async with aiohttp.ClientSession() as s:
        reply = await send(s, url + CHAT, data)
    assert reply.status == 400, reply.raw
    assert_answered_or_refused(reply, CHAT)
    assert reply.json()["error"]["param"] == param
    assert stub.completion_calls() == 0


VALID_TURNS: list[tuple[str, bytes]] = [
    ("assistant-tool-calls", chat_body(USER_HI, {"role": "assistant", "tool_calls": [CALL]},
                                       {"role": "tool", "content": "1", "tool_call_id": "c1"})),
    ("assistant-legacy-function-call",
     chat_body(USER_HI, {"role": "assistant", "content": None,
                         "function_call": {"name": "f", "arguments": "{}"}},
               {"role": "function", "name": "f", "content": "1"})),
    ("empty-string-content", chat_body({"role": "system", "content": ""}, USER_HI)),
    # Part types Deja does not know are the upstream's to judge (vLLM adds its own).
    ("unknown-part-type", chat_body({"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "video_url", "video_url": {"url": "x"}}]})),
]  # fmt: skip


@pytest.mark.parametrize("data", [b for _, b in VALID_TURNS], ids=[n for n, _ in VALID_TURNS])
async def test_turns_with_their_required_fields_reach_the_upstream(
    url: str, stub: StubUpstream, data: bytes
) -> None:
    async with aiohttp.ClientSession() as s:
        reply = await send(s, url + CHAT, data)
    assert reply.status == 200, reply.raw
    assert stub.completion_calls() == 1


async def test_errors_name_the_parameter_of_a_wrong_type(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        n_bool = await send(s, url + CHAT, with_user(b'"n": true'))
        part = await send(s, url + CHAT, chat_body({"role": "user", "content": ["hi"]}))
    assert n_bool.json()["error"]["param"] == "n"
    assert part.json()["error"]["param"] == "messages[0].content[0]"
