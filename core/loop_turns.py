"""Turns on the event loop for work that can wait: one per loop iteration, and only when
nothing else is ready to run (or it has waited `max_deferral_s`).

asyncio runs every callback that is ready in one iteration before it polls its sockets again.
When the model processes hand back a batch, ten or thirty semantic lookups become ready at
once, and their Python steps (the FAISS search and the meaning guards, building and storing an
entry) would run back to back: an exact hit that arrived meanwhile waits for all of them, though
its own work is a quarter of a millisecond. `asyncio.sleep(0)` between steps does not help,
since every task that yields goes into the next iteration together.

Work off the exact-hit path awaits `LoopTurns.take()` before each such step instead. A turn is
given at most once per iteration, and only in an iteration where no other callback is ready
(the requests that arrived since the last poll, exact hits among them, go first), or when the
waiting work has let others go first for `max_deferral_s` in a row: under a load of exact hits
that never lets up, it still gets a turn that often, so it is slowed, never starved. A hit then
waits for the one deferrable step already running when it arrived, not for a batch of them.
The loop is never idle while a turn is waiting, and an iteration with nothing else to do costs
a few microseconds.

Whether other callbacks are ready is read from the loop's ready queue (`_ready`, private to
asyncio's BaseEventLoop, stable since Python 3.4); on a loop without one, every iteration gives
a turn.

`create_app` makes three lanes: the steps of lookups past the exact tiers, a miss's own steps
(the upstream send, parsing and writing a whole answer), both deferred behind ready work, and
storing answers (`max_deferral_s=0`: spread out but never deferred, so a client that repeats
its question at once finds the answer stored). The request ledger drains its batches of
finished requests through a lane of its own (proxy/http/request_ledger.py). Each lane spaces its
own steps; one lane shared by unrelated parts would make them wait in line behind each other.
A lane does not give way to another lane's queued release, only to real work. (Sharing one
turn per iteration between the lookup and upstream lanes was tried; the bench could not tell
it apart from a turn each.)
"""

from __future__ import annotations

import asyncio
from collections import deque

# Under a steady stream of other work, waiting steps still get a turn this often.
MAX_DEFERRAL_S = 0.002


class LoopTurns:
    def __init__(self, max_deferral_s: float = MAX_DEFERRAL_S) -> None:
        self._max_deferral_s = max_deferral_s
        self._waiting: deque[asyncio.Future[None]] = deque()
        # The loop a release is scheduled on, while one is.
        self._releasing: asyncio.AbstractEventLoop | None = None
        # loop.time() when the waiting steps began to let other work go first, while they do.
        self._deferring_since: float | None = None
        self.granted = 0
        self.deferred = 0  # iterations in which a waiting step let other work go first

    @property
    def waiting(self) -> int:
        return sum(1 for turn in self._waiting if not turn.done())

    async def take(self) -> None:
        """Return at the start of a loop iteration of this caller's own, after every other
        caller that asked first has had its turn."""
        loop = asyncio.get_running_loop()
        if self._releasing is not loop and (self._max_deferral_s <= 0 or not _others_ready(loop)):
            # Nobody is waiting and nothing else is ready: the step goes on in the next
            # iteration, as after a plain yield. The release queued before it finds nobody
            # waiting, or gives the next caller the iteration after.
            self._start_releasing(loop)
            self.granted += 1
            await asyncio.sleep(0)
            return
        turn: asyncio.Future[None] = loop.create_future()
        self._waiting.append(turn)
        if self._releasing is not loop:
            # None, or a loop that has gone (tests run one loop after another): its waiters
            # were cancelled with it, and _release skips them.
            self._start_releasing(loop)
        await turn

    def _start_releasing(self, loop: asyncio.AbstractEventLoop) -> None:
        self._releasing = loop
        self._deferring_since = None
        loop.call_soon(self._release, loop)

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._releasing is not loop:
            return  # superseded by a release on another loop
        # A caller cancelled while it waited gave its turn up; one left on a loop that has gone
        # will never run again.
        while self._waiting and (
            self._waiting[0].done() or self._waiting[0].get_loop() is not loop
        ):
            self._waiting.popleft()
        if not self._waiting:
            self._releasing = None
            return
        if _others_ready(loop):
            now = loop.time()
            if self._deferring_since is None:
                self._deferring_since = now
            if now - self._deferring_since < self._max_deferral_s:
                self.deferred += 1
                loop.call_soon(self._release, loop)  # after what is ready: look again then
                return
        self._deferring_since = None
        self._waiting.popleft().set_result(None)
        self.granted += 1
        # Queued after the woken caller's step, which set_result has just queued: the next turn
        # starts an iteration later, after the loop has polled its sockets again. With nobody
        # left waiting, that release only ends the run.
        loop.call_soon(self._release, loop)


class NoLoopTurns(LoopTurns):
    """Lanes that never space anything: `take()` returns at once, without yielding, as if the
    step had no turn to take. For measuring what the turns are worth (bench/semantic_latency.py
    --turns-ab), chosen once in create_app."""

    async def take(self) -> None:
        return


def _others_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether a callback other than a lane's own release is ready: two lanes with steps
    waiting would otherwise each see the other's release as work to give way to, and both sit
    out `max_deferral_s` for nothing."""
    ready = getattr(loop, "_ready", None)
    if not ready:
        return False
    for handle in ready:
        callback = getattr(handle, "_callback", None)
        if getattr(callback, "__func__", None) not in _LANE_RELEASES:
            return True
    return False


_LANE_RELEASES = frozenset({LoopTurns._release})
