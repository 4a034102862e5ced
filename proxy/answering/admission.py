"""Admission control for upstream calls: a bound on calls in progress and on calls queued.

Past the queue bound a request fails at once with 429 and Retry-After, rather than piling up
behind a model server that is already saturated (queued work would time out anyway, after
holding memory and sockets). A queued call that waits longer than `queue_timeout_s` also
gets a 429. A call waiting to retry gives its slot up meanwhile (`Slot.pause`). Cache hits
never pass through here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from core.errors import RateLimited


class AdmissionControl:
    def __init__(self, max_concurrent: int, max_queued: int, queue_timeout_s: float) -> None:
        assert max_concurrent >= 1, "at least one upstream call must be allowed"
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_concurrent = max_concurrent
        self._max_queued = max_queued
        self._queue_timeout_s = queue_timeout_s
        self._queued = 0
        self._active = 0
        self.rejected = 0

    @property
    def active(self) -> int:
        return self._active

    @property
    def queued(self) -> int:
        return self._queued

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        await self._enter()
        slot = Slot(self)
        try:
            yield slot
        finally:
            if slot.held:
                self._leave()

    async def _enter(self) -> None:
        if self._slots.locked():
            if self._queued >= self._max_queued:
                self.rejected += 1
                raise RateLimited(
                    f"{self._max_concurrent} upstream calls in progress and {self._queued} queued",
                    retry_after_s=1,
                )
            self._queued += 1
            try:
                async with asyncio.timeout(self._queue_timeout_s):
                    await self._slots.acquire()
            except TimeoutError:
                self.rejected += 1
                raise RateLimited(
                    f"waited {self._queue_timeout_s:g} s for an upstream slot", retry_after_s=2
                ) from None
            finally:
                self._queued -= 1
        else:
            await self._slots.acquire()
        self._active += 1

    def _leave(self) -> None:
        self._active -= 1
        self._slots.release()


class Slot:
    """One admitted call's hold on its slot. A call waiting between two attempts (a backoff,
    a 429's Retry-After) gives the slot up meanwhile through `pause`: holding it would keep
    another request from an upstream that may well serve it, and stall every call behind a
    rate limit that only asked this one to wait."""

    def __init__(self, control: AdmissionControl) -> None:
        self._control = control
        self.held = True

    async def pause(self, seconds: float) -> None:
        """Sleep `seconds` without the slot, then take one again like any new call: at the
        back of the queue, and refused (RateLimited) when the queue is full or too slow."""
        assert self.held, "a slot pauses only while it is held"
        self._control._leave()
        self.held = False
        await asyncio.sleep(seconds)
        await self._control._enter()
        self.held = True
