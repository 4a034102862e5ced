"""An in-memory upstream at the client's transport seam: scripted responses, no sockets.

`FakeTransport` implements `UpstreamTransport` (proxy/upstream/client.py). Each request sent
takes the next scripted reply; when the script is empty, the `responder` answers (by default
none: an unscripted request fails the test). A reply is a status, headers and a body cut into
the byte slices the reader gets one by one (so SSE events and UTF-8 characters can arrive split
anywhere), or a failure: refused (a connection error), silent before the headers or partway
through the body (the client's timeouts fire), or a body that breaks off.

`FakeModel` is a responder that answers like an OpenAI model would, "Answer to: <question>",
as one JSON body or as SSE chunks, and records each request body it was sent.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from core.errors import UpstreamProtocolError, UpstreamUnreachable
from proxy.upstream.client import RequestBody
from tests.support.stub_upstream import last_user_text

JSON = (("Content-Type", "application/json"),)
EVENT_STREAM = (("Content-Type", "text/event-stream"),)


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted response. `pieces` is the body as the reader receives it, slice by slice.
    After `broken_after` pieces the body breaks off; after `silent_after` pieces nothing more
    comes (the client's read timeout decides). `delay_s` passes before the headers."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = JSON
    pieces: tuple[bytes, ...] = ()
    broken_after: int | None = None
    silent_after: int | None = None
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Refused:
    """The request cannot be sent: `send` raises UpstreamUnreachable."""

    reason: str = "connection refused"


@dataclass(frozen=True, slots=True)
class Silent:
    """No status line ever comes: the client's first-byte timeout decides."""


Scripted = Reply | Refused | Silent


@dataclass(frozen=True, slots=True)
class SentRequest:
    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def json_reply(
    obj: Any, status: int = 200, headers: Mapping[str, str] | None = None, slice_bytes: int = 0
) -> Reply:
    """A JSON body, whole or (`slice_bytes` > 0) in slices of that many bytes."""
    body = json.dumps(obj).encode()
    return Reply(status, JSON + tuple((headers or {}).items()), sliced(body, slice_bytes))


def error_reply(
    status: int, code: str | None = None, headers: Mapping[str, str] | None = None
) -> Reply:
    """An OpenAI-style error object with `status`."""
    kind = "rate_limit_error" if status == 429 else "server_error"
    error = {"message": f"fake failure {status}", "type": kind, "code": code}
    return json_reply({"error": error}, status, headers)


def sse_reply(
    payloads: Iterable[dict[str, Any] | str],
    slice_bytes: int | Sequence[int] = 0,
    done: bool = True,
    broken_after: int | None = None,
    silent_after: int | None = None,
) -> Reply:
    """`data:` events for `payloads` (then `[DONE]` when `done`), cut into slices: every
    `slice_bytes` bytes, or by the sizes given, cycled (0: one piece per event)."""
    events = [p if isinstance(p, str) else json.dumps(p) for p in payloads]
    events += ["[DONE]"] if done else []
    encoded = [f"data: {event}\n\n".encode() for event in events]
    pieces = tuple(encoded) if slice_bytes == 0 else sliced(b"".join(encoded), slice_bytes)
    return Reply(200, EVENT_STREAM, pieces, broken_after, silent_after)


def sliced(body: bytes, sizes: int | Sequence[int]) -> tuple[bytes, ...]:
    """`body` cut into consecutive slices of `sizes` bytes (one size, or sizes cycled)."""
    cycle = [sizes] if isinstance(sizes, int) else list(sizes)
    if not body or cycle == [0]:
        return (body,) if body else ()
    assert all(size > 0 for size in cycle), f"slice sizes must be positive: {cycle}"
    pieces, at, turn = [], 0, 0
    while at < len(body):
        size = cycle[turn % len(cycle)]
        pieces.append(body[at : at + size])
        at += size
        turn += 1
    return tuple(pieces)


class FakeBody:
    """`TransportResponse` over a scripted Reply."""

    def __init__(self, reply: Reply) -> None:
        self.status = reply.status
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict(reply.headers))
        self._reply = reply
        self._next = 0
        self.closed = False

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.read_chunk():
            parts.append(chunk)
        return b"".join(parts)

    async def read_chunk(self) -> bytes:
        assert not self.closed, "a closed response was read"
        reply = self._reply
        if reply.broken_after is not None and self._next >= reply.broken_after:
            raise UpstreamProtocolError("the upstream stream broke off: fake reset")
        if reply.silent_after is not None and self._next >= reply.silent_after:
            await asyncio.Event().wait()  # nothing ever comes
        if self._next >= len(reply.pieces):
            return b""
        self._next += 1
        return reply.pieces[self._next - 1]

    def close(self) -> None:
        self.closed = True


Responder = Callable[[SentRequest], Scripted]


def no_responder(request: SentRequest) -> Scripted:
    raise AssertionError(f"no reply scripted for {request.method} {request.url}")


@dataclass
class FakeTransport:
    """`UpstreamTransport` in memory: `script` first, then `responder`."""

    script: deque[Scripted] = field(default_factory=deque)
    responder: Responder = no_responder
    sent: list[SentRequest] = field(default_factory=list)
    bodies: list[FakeBody] = field(default_factory=list)
    started: bool = False
    closed: bool = False

    @classmethod
    def scripted(cls, *replies: Scripted) -> FakeTransport:
        return cls(deque(replies))

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    async def send(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: RequestBody
    ) -> FakeBody:
        assert self.started and not self.closed, "the transport is not started"
        if not isinstance(body, bytes):  # streamed: sent whole before any reply, as on a wire
            body = b"".join([chunk async for chunk in body])
        request = SentRequest(method, url, tuple(headers), body)
        self.sent.append(request)
        scripted = self.script.popleft() if self.script else self.responder(request)
        if isinstance(scripted, Refused):
            raise UpstreamUnreachable(f"cannot connect to the upstream: {scripted.reason}")
        if isinstance(scripted, Silent):
            await asyncio.Event().wait()
        assert isinstance(scripted, Reply)
        if scripted.delay_s:
            await asyncio.sleep(scripted.delay_s)
        response = FakeBody(scripted)
        self.bodies.append(response)
        return response

    def unreleased(self) -> int:
        """Responses handed out and never closed (each one a leaked connection)."""
        return sum(1 for body in self.bodies if not body.closed)


def chat_completion(text: str, finish_reason: str = "stop") -> dict[str, Any]:
    """A whole chat completion answering `text`."""
    message = {"role": "assistant", "content": text}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def chat_chunks(text: str, finish_reason: str = "stop") -> list[dict[str, Any]]:
    """The streamed form of a chat completion answering `text`: a role chunk, a chunk per
    word (its trailing space with it), the finish."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": word} for word in re.findall(r"\S*\s*", text) if word]
    head = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in deltas
    ]
    end = {"index": 0, "delta": {}, "finish_reason": finish_reason}
    return [*chunks, {**head, "choices": [end]}]


@dataclass
class FakeModel:
    """A responder that answers chat requests as the stub upstream does ("Answer to: <last
    user text>"), streamed when asked; `status` >= 300 answers with that error instead."""

    answer: Callable[[dict[str, Any]], str] = lambda body: f"Answer to: {last_user_text(body)}"
    status: int = 200
    delay_s: float = 0.0  # before the headers
    calls: list[dict[str, Any]] = field(default_factory=list)  # the request bodies, in order

    def __call__(self, request: SentRequest) -> Scripted:
        body = request.json()
        self.calls.append(body)
        if self.status >= 300:
            reply = error_reply(self.status)
        elif body.get("stream"):
            reply = sse_reply(chat_chunks(self.answer(body)))
        else:
            reply = json_reply(chat_completion(self.answer(body)))
        return replace(reply, delay_s=self.delay_s)
