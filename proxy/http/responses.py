"""Writing answers: cached entries, live flights, errors; JSON or SSE as the client asked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from core.errors import BreakerOpen, DejaError, RateLimited, UpstreamError, UpstreamProtocolError
from core.ids import IdSequence
from core.pacing import Pacer
from normalize.keys.request import CacheRequest, Route
from proxy.answering.entry_builder import without_logprobs
from proxy.answering.flights import (
    Flight,
    FlightBody,
    FlightChunk,
    FlightEnd,
    FlightEvent,
    FlightFailed,
    FlightHead,
)
from proxy.http.request_context import RequestContext
from proxy.protocol.response_object import ID_PREFIX, served_response
from proxy.protocol.responses_stream import encode_typed_event, replay_payload
from proxy.protocol.sse import DONE, dumps, encode_event, replay_chunks

JSON = "application/json"
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
# Upstream headers that describe the upstream's own message framing or identity; ours differ.
_NOT_RELAYED = frozenset({"content-type", "date", "server", "x-request-id"})


@dataclass(frozen=True, slots=True)
class Undelivered:
    """A flight that gave this waiter no answer to write: the upstream failed, broke off, or
    answered 5xx. The handler decides what the client gets instead (a degraded answer, else
    `upstream_reply` when the upstream's own 5xx may pass through, else the error), so the
    writer never calls back up into it."""

    error: DejaError
    upstream_reply: web.Response | None = None


_ID_PREFIXES = {Route.CHAT: "chatcmpl-", Route.COMPLETIONS: "cmpl-", Route.RESPONSES: ID_PREFIX}


def new_response_id(route: Route, ids: IdSequence) -> str:
    return _ID_PREFIXES[route] + ids.next_id()


def identified(
    creq: CacheRequest, completion: dict[str, Any], ids: IdSequence, now: float
) -> dict[str, Any]:
    """A stored answer as this request is served it: a fresh id and creation time, except a
    Responses API answer the upstream keeps, which keeps its own (response_object.py)."""
    fresh = new_response_id(creq.route, ids)
    if creq.route is Route.RESPONSES:
        return served_response(completion, fresh, int(now), creq.upstream_keeps)
    return {**completion, "id": fresh, "created": int(now)}


def error_payload(error: DejaError) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "message": error.message,
                "type": error.error_type,
                "code": error.code,
                "param": error.param,
            }
        }
    )


def error_response(error: DejaError, ctx: RequestContext | None = None) -> web.Response:
    headers = ctx.cache_headers() if ctx is not None else {}
    if isinstance(error, RateLimited | BreakerOpen):
        headers["Retry-After"] = str(error.retry_after_s)
    if ctx is not None:
        ctx.error_code = error.code
    return web.Response(
        status=error.status, body=error_payload(error), content_type=JSON, headers=headers
    )


def json_response(payload: bytes, ctx: RequestContext, status: int = 200) -> web.Response:
    headers = ctx.cache_headers()
    # The header itself rather than content_type=: aiohttp then skips its charset handling.
    headers["Content-Type"] = JSON
    return web.Response(status=status, body=payload, headers=headers)


async def write_completion(
    request: web.Request,
    ctx: RequestContext,
    completion: dict[str, Any],
    creq: CacheRequest,
) -> web.StreamResponse:
    """A complete answer (cached or assembled), as JSON or replayed as SSE."""
    if not creq.stream:
        return json_response(dumps(completion).encode(), ctx)
    return await write_replay(request, ctx, completion, creq)


async def write_replay(
    request: web.Request, ctx: RequestContext, completion: dict[str, Any], creq: CacheRequest
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **ctx.cache_headers()})
    await response.prepare(request)
    if creq.route is Route.RESPONSES:
        payload = replay_payload(completion)
    else:
        chunks = replay_chunks(completion, creq.route, creq.include_usage)
        payload = b"".join(encode_event(dumps(chunk)) for chunk in chunks) + encode_event(DONE)
    await response.write(payload)
    await response.write_eof()
    return response


class FlightWriter:
    """Serves one waiter of a flight, in the waiter's own format."""

    def __init__(
        self,
        request: web.Request,
        ctx: RequestContext,
        creq: CacheRequest,
        flight: Flight,
        turns: Pacer,
    ) -> None:
        self._turns = turns
        self._request = request
        self._ctx = ctx
        self._creq = creq
        self._flight = flight

    @property
    def _added_logprobs(self) -> bool:
        return self._flight.added_logprobs

    async def write(self) -> web.StreamResponse | Undelivered:
        flight = self._flight
        events = flight.follow()
        first = await anext(events)
        if isinstance(first, FlightFailed):
            return Undelivered(first.error)
        assert isinstance(first, FlightHead), f"a flight starts with its head, not {first!r}"
        self._ctx.upstream_status = first.status
        if not 200 <= first.status < 300:
            return self._upstream_error(first, await anext(events))
        if flight.stream and self._creq.stream:
            return await self._stream_live(first, events)
        terminal = await _last(events)
        if isinstance(terminal, FlightFailed):
            return Undelivered(terminal.error)
        completion = terminal.completion if isinstance(terminal, FlightEnd) else terminal.obj
        if completion is None:
            return Undelivered(
                UpstreamProtocolError("the upstream's answer was incomplete or not JSON")
            )
        # Writing a whole answer is one of the miss's steps that can wait for a turn (ready
        # hits go first); a live stream is not held up.
        await self._turns.step()
        if isinstance(terminal, FlightBody) and not self._creq.stream and not self._added_logprobs:
            # The upstream's own bytes, untouched.
            return self._relay(first, terminal.raw)
        return await write_completion(
            self._request, self._ctx, self._client_view(completion), self._creq
        )

    def _upstream_error(
        self, head: FlightHead, body: FlightEvent
    ) -> web.StreamResponse | Undelivered:
        if isinstance(body, FlightFailed):
            return Undelivered(body.error)
        assert isinstance(body, FlightBody)
        if head.status >= 500:
            error = UpstreamError(f"the upstream answered {head.status}")
            return Undelivered(error, self._relay(head, body.raw))
        return self._relay(head, body.raw)  # 4xx always pass through unchanged

    def _relay(self, head: FlightHead, raw: bytes) -> web.Response:
        headers = _relayed_headers(head)
        headers.update(self._ctx.cache_headers())
        content_type = dict((k.lower(), v) for k, v in head.headers).get("content-type", JSON)
        headers["Content-Type"] = content_type
        return web.Response(status=head.status, body=raw, headers=headers)

    def _client_view(self, completion: dict[str, Any]) -> dict[str, Any]:
        if not self._added_logprobs:
            return completion
        return {
            **completion,
            "choices": [without_logprobs(c) for c in completion.get("choices", [])],
        }

    async def _stream_live(
        self, head: FlightHead, events: AsyncIterator[FlightEvent]
    ) -> web.StreamResponse:
        headers = _relayed_headers(head)
        headers.update(SSE_HEADERS)
        headers.update(self._ctx.cache_headers())
        response = web.StreamResponse(status=head.status, headers=headers)
        await response.prepare(self._request)
        typed = self._creq.route is Route.RESPONSES
        last_number: Any = None
        async for event in events:
            if isinstance(event, FlightChunk):
                if typed:
                    # The Responses API's typed events go on as they came, `event:` line too.
                    if event.obj is not None:
                        last_number = event.obj.get("sequence_number", last_number)
                    await response.write(encode_typed_event(event.data, event.obj))
                    continue
                data = self._client_chunk(event)
                if data is not None:
                    await response.write(encode_event(data))
            elif isinstance(event, FlightEnd) and event.completion is not None:
                if not typed:  # a Responses stream ends with its terminal event
                    await response.write(encode_event(DONE))
            elif isinstance(event, FlightEnd | FlightFailed):
                # Too late for a status code: say it in the stream, as OpenAI does. A stream
                # that ended without [DONE] is not given one: the answer may be cut short.
                error = (
                    event.error
                    if isinstance(event, FlightFailed)
                    else UpstreamProtocolError(
                        "the upstream's stream ended without "
                        + ("its terminal event" if typed else "[DONE]")
                    )
                )
                self._ctx.error_code = error.code
                if typed:
                    await response.write(typed_error_event(error, last_number))
                else:
                    await response.write(encode_event(error_payload(error).decode()))
        await response.write_eof()
        return response

    def _client_chunk(self, chunk: FlightChunk) -> str | None:
        obj = chunk.obj
        strip_usage = not self._creq.include_usage
        if obj is None or not (self._added_logprobs or (strip_usage and "usage" in obj)):
            return chunk.data
        if strip_usage and "usage" in obj:
            if not obj.get("choices"):
                return None  # the usage-only chunk Deja asked for on its own account
            obj = {k: v for k, v in obj.items() if k != "usage"}
        if self._added_logprobs:
            obj = {**obj, "choices": [without_logprobs(c) for c in obj.get("choices", [])]}
        return dumps(obj)


def typed_error_event(error: DejaError, last_number: Any) -> bytes:
    """A Responses stream's `error` event: its fields as OpenAI sends them, and the `error`
    object as well, on which the official SDKs raise."""
    body = orjson.loads(error_payload(error))["error"]
    number = last_number + 1 if isinstance(last_number, int) else 0
    event = {
        "type": "error",
        "code": body["code"],
        "message": body["message"],
        "param": body["param"],
        "sequence_number": number,
        "error": body,
    }
    return encode_typed_event(dumps(event), event)


async def _last(events: AsyncIterator[FlightEvent]) -> FlightBody | FlightEnd | FlightFailed:
    async for event in events:
        if isinstance(event, FlightBody | FlightEnd | FlightFailed):
            return event
    raise AssertionError("a flight's events end with a terminal event")


def _relayed_headers(head: FlightHead) -> dict[str, str]:
    return {k: v for k, v in head.headers if k.lower() not in _NOT_RELAYED}
