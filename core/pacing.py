"""Pacing work that can wait: the seam (`Pacer`) and its two implementations.

asyncio runs every callback that is ready in one iteration before it polls its sockets again.
When the model processes hand back a batch, ten or thirty semantic lookups become ready at
once, and their Python steps (the FAISS search and the meaning guards, building and storing an
entry, parsing and writing a whole answer) would run back to back: an exact hit that arrived
meanwhile waits for all of them, though its own work is a quarter of a millisecond.
`asyncio.sleep(0)` between steps does not help, since every task that yields goes into the next
iteration together.

Work off the exact-hit path awaits `Pacer.step()` before each such step. `LoopTurns` lets one
waiting step go per loop iteration, in the order asked: the loop polls its sockets between two
of them, so a hit that arrives waits for the one step already running, not for a batch. The
loop is never idle while a step waits, and with nobody waiting a step costs what a plain
`sleep(0)` does: one iteration. Only public asyncio calls are used (futures, `call_soon`).

An earlier version also held a step back while other callbacks were ready, read from asyncio's
private `loop._ready`; measured against this one in the same run (one process, exact-hit p99
under 32 concurrent semantic lookups, README "Semantic latency"), both cut that p99 by half
against no pacing (0.43 and 0.50 of it), so the private read went.

The composition root makes one `LoopTurns` per lane and hands each to the code that paces with
it: the lookups past the exact tiers (`CompletionHandler` passes it to `CacheService.lookup`,
which passes it on to the semantic index), a miss's own steps (`UpstreamCaller`, `FlightWriter`),
storing answers (`AnswerStore`), and the request ledger's drain. A lane spaces only its own
steps; one lane shared by unrelated parts would make them wait in line behind each other. The
tiers keep no pacer of their own: a lookup is paced by its caller, or not at all (`Unpaced`:
the degraded path, the edge front, tests).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol


class Pacer(Protocol):
    async def step(self) -> None:
        """Return when the caller's next step may run."""
        ...


class Unpaced:
    """Every step runs at once."""

    async def step(self) -> None:
        return None


class LoopTurns:
    """One waiting step per event-loop iteration, in the order asked."""

    def __init__(self) -> None:
        self._waiting: deque[asyncio.Future[None]] = deque()
        # The loop a release is scheduled on, while one is.
        self._releasing: asyncio.AbstractEventLoop | None = None
        self.granted = 0

    @property
    def waiting(self) -> int:
        return sum(1 for turn in self._waiting if not turn.done())

    async def step(self) -> None:
        """Return at the start of a loop iteration of this caller's own, after every other
        caller that asked first has had its turn."""
        loop = asyncio.get_running_loop()
        if self._releasing is not loop:
            # Nobody is waiting: the step goes on in the next iteration, as after a plain
            # yield. The release queued before it finds nobody waiting, or gives the next
            # caller the iteration after.
            self._start_releasing(loop)
            self.granted += 1
            await asyncio.sleep(0)
            return
        turn: asyncio.Future[None] = loop.create_future()
        self._waiting.append(turn)
        await turn

    def _start_releasing(self, loop: asyncio.AbstractEventLoop) -> None:
        # A loop that has gone (tests run one loop after another) left its waiters cancelled;
        # _release skips them.
        self._releasing = loop
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
        self._waiting.popleft().set_result(None)
        self.granted += 1
        # Queued after the woken caller's step, which set_result has just queued: the next turn
        # starts an iteration later, after the loop has polled its sockets again. With nobody
        # left waiting, that release only ends the run.
        loop.call_soon(self._release, loop)
