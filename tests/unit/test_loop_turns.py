"""LoopTurns: at most one waiting step per event-loop iteration, so I/O is served in between."""

from __future__ import annotations

import asyncio
import itertools
import socket

from core.loop_turns import LoopTurns, _others_ready


class IterationCounter:
    """Counts event-loop iterations: a callback that queues itself again runs once in each."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self._loop = loop
        self._handle = loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


def test_one_turn_per_iteration_in_the_order_asked() -> None:
    async def scenario() -> list[tuple[int, int]]:
        turns = LoopTurns()
        counter = IterationCounter(asyncio.get_running_loop())
        got: list[tuple[int, int]] = []

        async def step(name: int) -> None:
            await turns.take()
            got.append((name, counter.count))

        await asyncio.gather(*(step(i) for i in range(6)))
        counter.stop()
        assert turns.granted == 6 and turns.waiting == 0
        return got

    got = asyncio.run(scenario())
    assert [name for name, _ in got] == list(range(6))
    iterations = [n for _, n in got]
    assert all(b > a for a, b in itertools.pairwise(iterations)), iterations


def test_a_socket_that_becomes_readable_is_served_between_two_turns() -> None:
    """Ten steps that became ready together (a batch of embeddings came back); the first one
    makes a socket readable (an exact hit arrives). Its reader runs before the third step, not
    after the tenth, as it would if the steps only yielded with asyncio.sleep(0)."""

    async def scenario(take_turn: bool) -> list[str]:
        loop = asyncio.get_running_loop()
        turns = LoopTurns()
        order: list[str] = []
        near, far = socket.socketpair()
        near.setblocking(False)
        far.setblocking(False)

        def readable() -> None:
            far.recv(16)
            order.append("hit")

        loop.add_reader(far, readable)

        async def step(name: int) -> None:
            if take_turn:
                await turns.take()
            else:
                await asyncio.sleep(0)
            order.append(f"step{name}")
            if name == 0:
                near.send(b"GET")

        try:
            await asyncio.gather(*(step(i) for i in range(10)))
            for _ in range(3):
                await asyncio.sleep(0)
        finally:
            loop.remove_reader(far)
            near.close()
            far.close()
        return order

    with_turns = asyncio.run(scenario(take_turn=True))
    assert with_turns.index("hit") <= with_turns.index("step2"), with_turns
    without = asyncio.run(scenario(take_turn=False))
    assert without.index("hit") > without.index("step9"), without  # what the turns prevent


def test_a_caller_cancelled_while_waiting_gives_its_turn_up() -> None:
    async def scenario() -> list[str]:
        turns = LoopTurns()
        got: list[str] = []

        async def step(name: str) -> None:
            await turns.take()
            got.append(name)

        first = asyncio.create_task(step("first"))
        doomed = asyncio.create_task(step("doomed"))
        last = asyncio.create_task(step("last"))
        await asyncio.sleep(0)  # all three are waiting
        assert turns.waiting == 3
        doomed.cancel()
        await asyncio.gather(first, last)
        assert doomed.cancelled()
        assert turns.waiting == 0 and turns.granted == 2
        return got

    assert asyncio.run(scenario()) == ["first", "last"]


def test_one_instance_outlives_an_event_loop() -> None:
    """Tests run one loop after another; a caller left waiting on a loop that was closed
    must not stop the next loop's callers from getting their turns."""
    turns = LoopTurns()
    old = asyncio.new_event_loop()
    abandoned = old.create_task(turns.take())
    old.call_soon(old.stop)
    old.run_forever()  # one iteration: the caller is waiting, its release not run yet
    assert turns.waiting == 1
    old.close()

    async def take() -> str:
        await asyncio.wait_for(turns.take(), timeout=5)
        return "taken"

    assert asyncio.run(take()) == "taken"
    assert not abandoned.done()


def test_a_turn_waits_while_other_callbacks_are_ready() -> None:
    """Callbacks that are ready (what the last poll found, a hit's handler) run before the
    waiting step, even those queued after it asked for its turn."""

    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        turns = LoopTurns(max_deferral_s=60.0)
        order: list[str] = []
        waiting = asyncio.create_task(turns.take())
        await asyncio.sleep(0)  # it has asked

        def busy(left: int) -> None:
            order.append(f"busy{left}")
            if left:
                loop.call_soon(busy, left - 1)

        loop.call_soon(busy, 4)
        await waiting
        order.append("turn")
        assert turns.deferred > 0
        return order

    assert asyncio.run(scenario()) == ["busy4", "busy3", "busy2", "busy1", "busy0", "turn"]


def test_work_that_never_lets_up_still_leaves_a_turn_every_max_deferral() -> None:
    async def scenario() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        turns = LoopTurns(max_deferral_s=0.01)
        counter = IterationCounter(loop)  # always ready: the loop is never free
        started = loop.time()
        for _ in range(5):
            await asyncio.wait_for(turns.take(), timeout=5)
        elapsed = loop.time() - started
        counter.stop()
        return turns.granted, elapsed

    granted, elapsed_s = asyncio.run(scenario())
    assert granted == 5
    assert elapsed_s >= 0.04  # four deferrals of 10 ms at least, after the first turn


def test_without_deferral_a_turn_comes_the_next_iteration_whatever_else_is_ready() -> None:
    """The store lane: spread one step per iteration, never held back behind ready work."""

    async def scenario() -> tuple[int, int]:
        turns = LoopTurns(max_deferral_s=0.0)
        counter = IterationCounter(asyncio.get_running_loop())
        before = counter.count
        await turns.take()
        waited = counter.count - before
        counter.stop()
        return waited, turns.deferred

    waited, deferred = asyncio.run(scenario())
    assert waited <= 2 and deferred == 0


def test_lanes_do_not_give_way_to_each_others_releases() -> None:
    """A lane's queued release is not work to give way to: two deferring lanes that waited for
    each other's would each sit out max_deferral_s every turn."""

    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        lookups, misses = LoopTurns(), LoopTurns()
        work = loop.call_soon(lambda: None)  # keeps both lanes from their fast path
        waiters = [asyncio.ensure_future(lane.take()) for lane in (lookups, misses)]
        await asyncio.sleep(0)  # both wait, and both releases are queued
        work.cancel()
        only_releases = _others_ready(loop)
        loop.call_soon(lambda: None)
        with_work = _others_ready(loop)
        await asyncio.gather(*waiters)
        return only_releases, with_work

    assert asyncio.run(scenario()) == (False, True)
