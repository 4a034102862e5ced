"""A flight's call is cancelled when its last waiter leaves before the answer is complete, and
only then: once the answer is whole, storing it finishes even though every waiter has gone.

The call is a scripted coroutine (the seam); the Flight and FlightRegistry are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib

from proxy.answering.flights import Flight, FlightChunk, FlightEnd, FlightHead, FlightRegistry


class ScriptedCall:
    """Publishes a head and a chunk, waits for `more`, ends the stream, then "stores" the
    answer, which takes until `stored_may_finish` is set."""

    def __init__(self) -> None:
        self.more = asyncio.Event()
        self.stored_may_finish = asyncio.Event()
        self.stored = False
        self.cancelled = False

    async def __call__(self, flight: Flight) -> None:
        try:
            flight.publish(FlightHead(200, ()))
            flight.publish(FlightChunk('{"choices": []}', {"choices": []}))
            await self.more.wait()
            flight.publish(FlightEnd({"choices": []}))
            await self.stored_may_finish.wait()
            self.stored = True
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def task_of(flight: Flight) -> asyncio.Task[None]:
    assert flight.task is not None
    return flight.task


async def follow_to_the_end(flight: Flight) -> int:
    with flight.attendance():
        return len([event async for event in flight.follow()])


async def test_the_last_waiter_leaving_mid_answer_cancels_the_call() -> None:
    registry, call = FlightRegistry(), ScriptedCall()
    flight = registry.start(Flight("k", "e", True, True, False), call)
    with flight.attendance():  # the client disconnects once it has the head
        assert isinstance(await anext(flight.follow()), FlightHead)
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task_of(flight), 1)
    assert (call.cancelled, call.stored) == (True, False)
    assert registry.joinable("k") is None and len(registry) == 0


async def test_one_waiter_leaving_does_not_cancel_the_call_for_the_others() -> None:
    registry, call = FlightRegistry(), ScriptedCall()
    flight = registry.start(Flight("k", "e", True, True, False), call)
    staying = asyncio.create_task(follow_to_the_end(flight))
    with flight.attendance():
        await anext(flight.follow())
    call.more.set()
    call.stored_may_finish.set()
    assert await staying == 3  # head, chunk, end
    await asyncio.wait_for(task_of(flight), 1)
    assert (call.cancelled, call.stored) == (False, True)


async def test_storing_a_complete_answer_outlives_the_waiters() -> None:
    registry, call = FlightRegistry(), ScriptedCall()
    flight = registry.start(Flight("k", "e", True, True, False), call)
    call.more.set()
    assert await follow_to_the_end(flight) == 3  # the only waiter got everything and left
    await asyncio.sleep(0.01)
    assert not task_of(flight).done()  # still storing
    call.stored_may_finish.set()
    await asyncio.wait_for(task_of(flight), 1)
    assert (call.cancelled, call.stored) == (False, True)
