"""Writing answers: cached entries, live flights, errors; JSON or SSE as the client asked."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from core.errors import BreakerOpen, DejaError, RateLimited, UpstreamError, UpstreamProtocolError
from core.ids import IdSequence
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
from proxy.protocol.sse import DONE, dumps, encode_event, replay_chunks

JSON = "application/json"
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
# Upstream headers that describe the upstream's own message framing or identity; ours differ.
_NOT_RELAYED = frozenset({"content-type", "date", "server", "x-request-id"})

Degrader = Callable[[DejaError], Awaitable[web.StreamResponse | None]]


def new_response_id(route: Route, ids: IdSequence) -> str:
    return ("chatcmpl-" if route is Route.CHAT else "cmpl-") + ids.next_id()


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
    payload = b"".join(
        encode_event(dumps(chunk))
        for chunk in replay_chunks(completion, creq.route, creq.include_usage)
    )
    await response.write(payload + encode_event(DONE))
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
        degrade: Degrader,
    ) -> None:
        self._request = request
        self._ctx = ctx
        self._creq = creq
        self._flight = flight
        self._degrade = degrade

    @property
    def _added_logprobs(self) -> bool:
        return self._flight.added_logprobs

    async def write(self) -> web.StreamResponse:
        flight = self._flight
        events = flight.follow()
        first = await anext(events)
        if isinstance(first, FlightFailed):
            return await self._failed(first.error)
        assert isinstance(first, FlightHead), f"a flight starts with its head, not {first!r}"
        self._ctx.upstream_status = first.status
        if not 200 <= first.status < 300:
            return await self._upstream_error(first, await anext(events))
        if flight.stream and self._creq.stream:
            return await self._stream_live(first, events)
        terminal = await _last(events)
        if isinstance(terminal, FlightFailed):
            return await self._failed(terminal.error)
        completion = terminal.completion if isinstance(terminal, FlightEnd) else terminal.obj
        if completion is None:
            return await self._failed(
                UpstreamProtocolError("the upstream's answer was incomplete or not JSON")
            )
        if isinstance(terminal, FlightBody) and not self._creq.stream and not self._added_logprobs:
            # The upstream's own bytes, untouched.
            return self._relay(first, terminal.raw)
        return await write_completion(
            self._request, self._ctx, self._client_view(completion), self._creq
        )

    async def _failed(self, error: DejaError) -> web.StreamResponse:
        fallback = await self._degrade(error)
        return fallback if fallback is not None else error_response(error, self._ctx)

    async def _upstream_error(self, head: FlightHead, body: FlightEvent) -> web.StreamResponse:
        if isinstance(body, FlightFailed):
            return await self._failed(body.error)
        assert isinstance(body, FlightBody)
        if head.status >= 500:
            fallback = await self._degrade(UpstreamError(f"the upstream answered {head.status}"))
            if fallback is not None:
                return fallback
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
        async for event in events:
            if isinstance(event, FlightChunk):
                data = self._client_chunk(event)
                if data is not None:
                    await response.write(encode_event(data))
            elif isinstance(event, FlightEnd) and event.completion is not None:
                await response.write(encode_event(DONE))
            elif isinstance(event, FlightEnd | FlightFailed):
                # Too late for a status code: say it in the stream, as OpenAI does. A stream
                # that ended without [DONE] is not given one: the answer may be cut short.
                error = (
                    event.error
                    if isinstance(event, FlightFailed)
                    else UpstreamProtocolError("the upstream's stream ended without [DONE]")
                )
                self._ctx.error_code = error.code
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


async def _last(events: AsyncIterator[FlightEvent]) -> FlightBody | FlightEnd | FlightFailed:
    async for event in events:
        if isinstance(event, FlightBody | FlightEnd | FlightFailed):
            return event
    raise AssertionError("a flight's events end with a terminal event")


def _relayed_headers(head: FlightHead) -> dict[str, str]:
    return {k: v for k, v in head.headers if k.lower() not in _NOT_RELAYED}
