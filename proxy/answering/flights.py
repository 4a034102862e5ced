"""Singleflight: one upstream call per in-flight question, shared by every caller that asks it.

A `Flight` records what its upstream call produced as a list of events (head, chunks or body,
end or failure). Each waiter follows the list from the start at its own pace, so a caller that
joins late still gets the whole answer, streamed or not as it asked. The call runs in its own
task and is cancelled only when its last waiter leaves (a client that disconnects leaves)
before the answer is complete; then nothing is stored.

    leader ──▶ Flight.task ──publish──▶ [Head, Chunk, Chunk, …, End]
                                          ▲         ▲
    waiter 1 (stream) ──follow()──────────┘         │
    waiter 2 (JSON)  ──follow()─────────────────────┘
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from core.errors import DejaError, UpstreamError

_log = logging.getLogger("deja.flight")


@dataclass(frozen=True, slots=True)
class FlightHead:
    status: int
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class FlightChunk:
    """One SSE payload of a streamed answer; `obj` is None when it was not JSON."""

    data: str
    obj: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class FlightBody:
    """A whole non-streamed body (any status); `obj` is its JSON object when it has one."""

    raw: bytes
    obj: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class FlightEnd:
    """The stream ended. `completion` is the assembled answer when the stream terminated
    properly ([DONE] seen; for the Responses API, its terminal event), else None."""

    completion: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class FlightFailed:
    error: DejaError


FlightEvent = FlightHead | FlightChunk | FlightBody | FlightEnd | FlightFailed
TERMINAL = (FlightBody, FlightEnd, FlightFailed)


class Flight:
    def __init__(
        self, key: str, entry_id: str, stream: bool, will_store: bool, added_logprobs: bool
    ) -> None:
        self.key = key
        self.entry_id = entry_id
        self.stream = stream  # how the upstream was asked (the leader's choice)
        self.will_store = will_store
        # Deja asked the upstream for logprobs the clients did not ask for; the call clears
        # this when it had to retry without them.
        self.added_logprobs = added_logprobs
        self.events: list[FlightEvent] = []
        self._changed = asyncio.Event()
        self._waiters = 0
        self._finished = False
        self.task: asyncio.Task[None] | None = None

    @property
    def finished(self) -> bool:
        return self._finished

    def publish(self, event: FlightEvent) -> None:
        assert not self._finished, f"event after the end of flight {self.key}: {event!r}"
        self.events.append(event)
        if isinstance(event, TERMINAL):
            self._finished = True
        # Wake every follower, then give the next round its own event.
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self) -> AsyncIterator[FlightEvent]:
        """Every event from the first, waiting for new ones until a terminal event."""
        index = 0
        while True:
            changed = self._changed
            while index < len(self.events):
                event = self.events[index]
                index += 1
                yield event
                if isinstance(event, TERMINAL):
                    return
            await changed.wait()

    @contextlib.contextmanager
    def attendance(self) -> Any:
        """Count a waiter for as long as the block runs; the last one out cancels the call,
        unless its answer is already complete: then what is left is storing it, which must not
        be cut short (every waiter's block ends as soon as it has written that answer)."""
        self._waiters += 1
        try:
            yield self
        finally:
            self._waiters -= 1
            if (
                self._waiters == 0
                and not self._finished
                and self.task is not None
                and not self.task.done()
            ):
                self.task.cancel()


class FlightRegistry:
    """The flights in progress, by key (an exact key)."""

    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}
        self._running: set[Flight] = set()
        self.started = 0

    def __len__(self) -> int:
        return len(self._flights)

    def joinable(self, key: str) -> Flight | None:
        flight = self._flights.get(key)
        if flight is None or flight.task is None or flight.task.cancelled():
            return None
        return flight

    def start(
        self,
        flight: Flight,
        run: Callable[[Flight], Coroutine[Any, Any, None]],
        shared: bool = True,
    ) -> Flight:
        """Run `run(flight)` in a task; while it runs, `joinable(flight.key)` returns it
        (unless `shared` is false: a no-cache request wants an answer of its own)."""
        if shared:
            self._flights[flight.key] = flight
        self.started += 1
        flight.task = asyncio.get_running_loop().create_task(self._run(flight, run, shared))
        return flight

    async def _run(
        self, flight: Flight, run: Callable[[Flight], Coroutine[Any, Any, None]], shared: bool
    ) -> None:
        self._running.add(flight)
        try:
            await run(flight)
        except DejaError as exc:
            if not flight.finished:
                flight.publish(FlightFailed(exc))
        except Exception as exc:  # noqa: BLE001 - the task boundary: log, then tell the waiters
            # A bug in the call must not leave its waiters hanging: they get a 502 and the
            # traceback goes to the log. (Cancellation is a BaseException and passes.)
            _log.exception("upstream call for flight %s failed unexpectedly", flight.key)
            if not flight.finished:
                flight.publish(
                    FlightFailed(UpstreamError(f"internal error in the upstream call: {exc!r}"))
                )
        finally:
            self._running.discard(flight)
            if shared and self._flights.get(flight.key) is flight:
                del self._flights[flight.key]
            if not flight.finished:
                flight.publish(FlightFailed(UpstreamError("the upstream call was cancelled")))

    async def drain(self, timeout_s: float) -> None:
        """Wait (bounded) for the calls in progress, for graceful shutdown."""
        tasks = [f.task for f in self._running if f.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
