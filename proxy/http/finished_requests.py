"""Finished requests, handed to the request metrics and the access log in batches.

A request's own path pays one append here. Every `interval_s` (or once `max_pending` requests
wait, before every /metrics scrape, and at shutdown) the ledger drains: each request is counted
in the metrics and, when the access log is on, becomes one line, and the log writes the batch at
once. Under load this took a cache hit's throughput up by about 5% (A/B runs) against doing the
same work inside each request (the hot path stays small; the batch runs as one tight loop).

The timed drain takes `chunk` requests at a time, each chunk in a loop turn of its own
(core/pacing.py: one chunk per loop iteration, the loop polling its sockets between two): at
4,000 hits a second a 200 ms batch is 800 requests, about 1.5 ms of work here, and a cache hit
arriving meanwhile waited for all of it. In chunks of 128 taken one per iteration it still
showed: a timed trace of the exact hits slower than their p99 found a drain chunk (0.13 ms,
35 a second) in three of four of them. A chunk of 32 costs a hit at most about 35 µs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, NamedTuple, Protocol

from core.pacing import LoopTurns, Pacer
from proxy.http.access_log import access_record
from proxy.http.request_context import RequestContext


class RequestObserver(Protocol):
    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None: ...


class RequestObservers:
    """Several observers as one (the request metrics and the dashboard's series)."""

    def __init__(self, *observers: RequestObserver) -> None:
        self._observers = observers

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        for observer in self._observers:
            observer.observe_request(route, cache, status, seconds)


class RequestRecorder(Protocol):
    """Where the request frame hands every finished request (this ledger; edge mode's report)."""

    def record(self, method: str, ctx: RequestContext, status: int, elapsed_s: float) -> None: ...


class AccessLogWriter(Protocol):
    enabled: bool

    def write_lines(self, records: list[dict[str, Any]]) -> None: ...


class FinishedRequest(NamedTuple):
    method: str
    context: RequestContext  # its started_s is on the monotonic clock
    status: int
    elapsed_s: float


class RequestLedger:
    def __init__(
        self,
        metrics: RequestObserver,
        access_log: AccessLogWriter,
        interval_s: float = 0.2,
        max_pending: int = 4096,
        chunk: int = 32,
        turns: Pacer | None = None,
    ) -> None:
        self._metrics = metrics
        self._access_log = access_log
        self._interval_s = interval_s
        self._max_pending = max_pending
        self._chunk = chunk
        self._turns = turns or LoopTurns()
        self._pending: list[FinishedRequest] = []
        self._drainer: asyncio.Task[None] | None = None

    def record(self, method: str, ctx: RequestContext, status: int, elapsed_s: float) -> None:
        self._pending.append(FinishedRequest(method, ctx, status, elapsed_s))
        if len(self._pending) >= self._max_pending:
            self.drain()
        elif self._drainer is None:
            self._drainer = asyncio.get_running_loop().create_task(self._drain_later())

    async def _drain_later(self) -> None:
        """After `interval_s`, everything pending, a chunk per turn; what is recorded meanwhile
        joins this drain."""
        try:
            await asyncio.sleep(self._interval_s)
            while self._pending:
                await self._turns.step()
                batch = self._pending[: self._chunk]
                del self._pending[: self._chunk]
                self._flush(batch)
        finally:
            self._drainer = None

    def drain(self) -> None:
        """Observe and log everything recorded so far, at once."""
        pending, self._pending = self._pending, []
        self._flush(pending)

    async def close(self) -> None:
        """Stop the timed drain and drain what is left (at shutdown)."""
        drainer, self._drainer = self._drainer, None
        if drainer is not None:
            drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drainer
        self.drain()

    def _flush(self, pending: list[FinishedRequest]) -> None:
        if not pending:
            return
        observe = self._metrics.observe_request
        for _, ctx, status, elapsed_s in pending:
            cache = ctx.cache.value if ctx.cache is not None else "none"
            observe(ctx.route, cache, status, elapsed_s)
        if self._access_log.enabled:
            # The wall-clock time each request finished, from its monotonic start: one clock
            # pair per batch instead of a wall-clock read per request.
            wall_offset_s = time.time() - time.monotonic()
            self._access_log.write_lines(
                [
                    access_record(
                        method, ctx, status, elapsed_s, ctx.started_s + elapsed_s + wall_offset_s
                    )
                    for method, ctx, status, elapsed_s in pending
                ]
            )
