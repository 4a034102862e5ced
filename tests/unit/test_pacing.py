"""The pacer: LoopTurns lets at most one waiting step go per event-loop iteration, so I/O is
served in between; Unpaced lets every step go at once."""

from __future__ import annotations

import asyncio
import itertools
import socket

from core.pacing import LoopTurns, Unpaced


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
            await turns.step()
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
                await turns.step()
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
            await turns.step()
            got.append(name)

        first = asyncio.create_task(step("first"))
        doomed = asyncio.create_task(step("doomed"))
        last = asyncio.create_task(step("last"))
        await asyncio.sleep(0)  # the first went at once (nobody was waiting); two wait
        assert turns.waiting == 2
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
    first = old.create_task(turns.step())  # goes at once, and starts the releases on this loop
    abandoned = old.create_task(turns.step())
    old.call_soon(old.stop)
    old.run_forever()  # one iteration: the second caller is waiting, its release not run yet
    assert turns.waiting == 1
    old.close()

    async def take() -> str:
        await asyncio.wait_for(turns.step(), timeout=5)
        return "taken"

    assert asyncio.run(take()) == "taken"
    assert not abandoned.done() and not first.done()


def test_two_lanes_each_give_one_step_per_iteration() -> None:
    """Lanes are independent: lookups and misses waiting at once each get a turn in the same
    iteration, neither waits in line behind the other."""

    async def scenario() -> tuple[list[int], list[int]]:
        lookups, misses = LoopTurns(), LoopTurns()
        counter = IterationCounter(asyncio.get_running_loop())
        seen: dict[str, list[int]] = {"lookup": [], "miss": []}

        async def step(lane: LoopTurns, name: str) -> None:
            await lane.step()
            seen[name].append(counter.count)

        await asyncio.gather(
            *(step(lookups, "lookup") for _ in range(4)), *(step(misses, "miss") for _ in range(4))
        )
        counter.stop()
        return seen["lookup"], seen["miss"]

    lookup_iterations, miss_iterations = asyncio.run(scenario())
    assert lookup_iterations == miss_iterations, (lookup_iterations, miss_iterations)
    assert len(set(lookup_iterations)) == 4


def test_unpaced_steps_never_wait() -> None:
    async def scenario() -> int:
        counter = IterationCounter(asyncio.get_running_loop())
        pacer = Unpaced()
        for _ in range(10):
            await pacer.step()
        counter.stop()
        return counter.count

    assert asyncio.run(scenario()) == 0
