"""The client to the model server: timeouts, retries, and the seam it sends through.

The client sends through an `UpstreamTransport` (proxy/upstream/aiohttp_transport.py in
production, an in-memory fake in tests/support/fake_upstream.py), which raises only Deja's
UpstreamError family: the aiohttp one is where aiohttp's exceptions are translated. Every timeout
is the client's (first byte, each read of the body): a transport that stays silent becomes an
`UpstreamTimeout` here. Retries happen only inside `open()`, i.e. before the caller has seen
any byte of a response, so nothing a client received is ever sent twice. Which outcomes are
retried, and after how long, is `RetryPolicy`'s (proxy/upstream/retry_policy.py): connection
failures and 5xx after a backoff, rate-limit 429s after their Retry-After; the caller says how
a wait is spent (the gate gives up its admission slot meanwhile).

The OpenAI paths are appended to `upstream.url` as the OpenAI SDKs append them to their
`base_url`: `http://host/v1beta/openai` + `chat/completions`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from multidict import CIMultiDict, CIMultiDictProxy

from core.clock import Clock, SystemClock
from core.config import UpstreamConfig
from core.errors import UpstreamError, UpstreamTimeout, UpstreamUnreachable
from core.http_headers import HOP_BY_HOP
from core.tracing import TRACE_HEADERS, NoopTracer, StageTracer
from proxy.upstream.retry_policy import RATE_LIMITED, RetryPolicy, quota_exhausted

# How the wait between two attempts is spent (seconds in, returns when the next may start).
Pause = Callable[[float], Awaitable[None]]
# A request body: whole, or streamed as it arrives from the client (sent once: never retried).
RequestBody = bytes | AsyncIterable[bytes]


class TransportResponse(Protocol):
    """A response whose status line and headers arrived; its body not yet read."""

    status: int
    headers: CIMultiDictProxy[str]

    async def read(self) -> bytes:
        """The whole body; `UpstreamProtocolError` when it breaks off."""
        ...

    async def read_chunk(self) -> bytes:
        """The next bytes that arrived, however the sender cut them; b"" at the end;
        `UpstreamProtocolError` when the body breaks off."""
        ...

    def close(self) -> None:
        """Drop the response and its connection (an unread body is not drained)."""
        ...


class UpstreamTransport(Protocol):
    """The seam the client sends through: one HTTP exchange, no retries, no timeouts of its
    own beyond connecting and a whole-call ceiling. Raises only `UpstreamError`s (or a
    `TimeoutError`, which the client makes an `UpstreamTimeout`)."""

    async def start(self) -> None:
        """Open what it sends through (a connection pool), inside the running loop."""
        ...

    async def send(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: RequestBody
    ) -> TransportResponse:
        """Send one request; returns once the status line and headers arrived (any status).
        A streamed body is read as it is sent. `UpstreamUnreachable` when it could not be sent
        or no response began."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    path: str  # relative to the base URL, e.g. "chat/completions"
    headers: tuple[tuple[str, str], ...]
    body: RequestBody
    query: str = ""


class UpstreamResponse:
    """An open upstream response; the caller must `release()` it (or use `async with`)."""

    def __init__(self, response: TransportResponse, config: UpstreamConfig, started: float):
        self._response = response
        self._config = config
        self.status = response.status
        self.headers: CIMultiDictProxy[str] = response.headers
        self.ttfb_s = time.monotonic() - started
        # The body, once `read` has taken it whole (a 429 is read to judge its error code and
        # still handed on to the client, by `read` or `iter_chunks`, as it came).
        self._body: bytes | None = None

    def forwardable_headers(self) -> CIMultiDict[str]:
        return CIMultiDict((k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP)

    async def read(self) -> bytes:
        if self._body is not None:
            return self._body
        try:
            async with asyncio.timeout(self._config.read_timeout_s):
                self._body = await self._response.read()
                return self._body
        except TimeoutError as exc:
            raise UpstreamTimeout("the upstream stopped sending its response body") from exc

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        if self._body is not None:
            if self._body:
                yield self._body
            return
        while True:
            try:
                async with asyncio.timeout(self._config.read_timeout_s):
                    chunk = await self._response.read_chunk()
            except TimeoutError as exc:
                raise UpstreamTimeout("the upstream stream went silent") from exc
            if not chunk:
                return
            yield chunk

    def release(self) -> None:
        self._response.close()

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class UpstreamClient:
    def __init__(
        self,
        config: UpstreamConfig,
        transport: UpstreamTransport,
        rng: random.Random | None = None,
        clock: Clock | None = None,
        tracer: StageTracer | None = None,
    ) -> None:
        self._config = config
        self._base = config.url.rstrip("/") + "/"
        self._transport = transport
        self._retry = RetryPolicy(config, clock or SystemClock(), rng or random.Random())
        self._tracer = tracer or NoopTracer()

    @property
    def base_url(self) -> str:
        return self._base

    async def start(self) -> None:
        await self._transport.start()

    async def close(self) -> None:
        await self._transport.close()

    async def open(
        self, request: UpstreamRequest, *, retry: bool = True, pause: Pause = asyncio.sleep
    ) -> UpstreamResponse:
        """Send `request`; returns once the status line and headers arrived (any status).
        `retry` false sends it once (for calls that are not safe to repeat); `pause` spends
        each wait between two attempts."""
        assert isinstance(request.body, bytes) or not retry, "a streamed body cannot be resent"
        attempts = self._retry.attempts(retry)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await self._send_once(request)
            except UpstreamUnreachable:
                if last:
                    raise
                wait_s = self._retry.backoff_s(attempt)
            else:
                if last:
                    return response
                judged = await self._judge(attempt, response)
                if isinstance(judged, UpstreamResponse):
                    return judged
                wait_s = judged
            await pause(wait_s)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _judge(self, attempt: int, response: UpstreamResponse) -> UpstreamResponse | float:
        """The response itself when it is final, else the wait before the next attempt (the
        response released)."""
        wait_s = self._retry.wait_s(attempt, response.status, response.headers)
        if wait_s is None:
            return response
        if response.status == RATE_LIMITED:
            # An error object is small; once read, the client still gets it as it came.
            try:
                body = await response.read()
            except UpstreamError:
                body = b""  # a body that broke off names no code: retried like any 429
            if quota_exhausted(body):
                return response
        response.release()
        return wait_s

    async def _send_once(self, request: UpstreamRequest) -> UpstreamResponse:
        url = self._base + request.path + (f"?{request.query}" if request.query else "")
        started = time.monotonic()
        headers = with_trace_context(request.headers, self._tracer.outgoing_headers())
        first_byte_s = self._config.first_byte_timeout_s
        body = request.body
        try:
            # A streamed body (an upload) takes as long as its client takes to send it: the
            # first-byte timeout starts once it has all gone out.
            async with asyncio.timeout(
                None if isinstance(body, AsyncIterable) else first_byte_s
            ) as deadline:
                if isinstance(body, AsyncIterable):
                    body = _deadline_after(body, deadline, first_byte_s)
                response = await self._transport.send(request.method, url, headers, body)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"the upstream sent nothing within {self._config.first_byte_timeout_s:g} s"
            ) from exc
        return UpstreamResponse(response, self._config, started)


def with_trace_context(
    headers: tuple[tuple[str, str], ...], trace: Mapping[str, str]
) -> tuple[tuple[str, str], ...]:
    """`headers` carrying the current span's trace context (`trace`, from the tracer) in place
    of the client's: the upstream's spans become children of the proxy's. Without one (tracing
    off) the client's own traceparent goes on unchanged."""
    if not trace:
        return headers
    kept = tuple((k, v) for k, v in headers if k.lower() not in TRACE_HEADERS)
    return kept + tuple(trace.items())


async def _deadline_after(
    body: AsyncIterable[bytes], deadline: asyncio.Timeout, seconds: float
) -> AsyncIterator[bytes]:
    """`body`, then `deadline` set `seconds` after its last chunk went out."""
    async for chunk in body:
        yield chunk
    deadline.reschedule(asyncio.get_running_loop().time() + seconds)


def forward_headers(
    headers: Mapping[str, str], drop: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """Client headers worth sending upstream: not hop-by-hop, not Deja's own controls."""
    kept = []
    for name, value in headers.items():
        lower = name.lower()
        if lower in HOP_BY_HOP or lower in drop or lower.startswith("x-deja-"):
            continue
        kept.append((name, value))
    return kept
