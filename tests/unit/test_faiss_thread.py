"""FaissThread: FAISS calls off the event loop run with one OpenMP thread; background ones idle."""

from __future__ import annotations

import asyncio
import os
import threading

import faiss
import numpy as np
import pytest

from tiers.semantic.faiss_thread import FaissThread
from tiers.semantic.vector_index import GraphShape, VectorIndex


def settings() -> tuple[int, int, int, str]:
    """What a call sees of its thread: OpenMP threads, policy, nice value, thread name."""
    return (
        faiss.omp_get_max_threads(),
        os.sched_getscheduler(0),
        os.getpriority(os.PRIO_PROCESS, 0),
        threading.current_thread().name,
    )


def test_calls_run_with_one_openmp_thread_and_idle_only_when_asked() -> None:
    async def scenario() -> list[tuple[int, int, int, str]]:
        search, rebuild = FaissThread("deja-test-search"), FaissThread("deja-test-rebuild", True)
        try:
            return [await search.run(settings), await rebuild.run(settings), settings()]
        finally:
            await asyncio.gather(search.close(), rebuild.close())

    before = settings()
    in_search, in_rebuild, after = asyncio.run(scenario())
    # OpenMP's default for a new thread is one per core; the event loop's setting does not
    # reach it, and two spin-waiting OpenMP threads on one core made a search 25x slower.
    assert in_search[0] == 1 and in_rebuild[0] == 1
    assert in_search[1:3] == before[1:3]  # a search thread keeps the caller's priority
    assert in_rebuild[1] == os.SCHED_IDLE or in_rebuild[2] == 19
    assert in_search[3].startswith("deja-test-search")
    assert in_rebuild[3].startswith("deja-test-rebuild")
    # The priority is the thread's own: the event loop's thread keeps its class and nice value.
    assert after[1:3] == before[1:3]


def test_calls_run_one_at_a_time_in_order() -> None:
    async def scenario() -> list[int]:
        thread = FaissThread("deja-test-faiss")
        seen: list[int] = []
        try:
            await asyncio.gather(*(thread.run(seen.append, n) for n in range(50)))
        finally:
            await thread.close()
        return seen

    assert asyncio.run(scenario()) == list(range(50))


def test_a_search_in_the_thread_finds_what_a_search_on_the_loop_finds() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((2000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex(16, flat_max=10_000, graph=GraphShape(16, 40, 32))
    for vector_id, vector in enumerate(vectors, 1):
        index.add(vector_id, vector)

    async def scenario() -> list[tuple[int, float]]:
        thread = FaissThread("deja-test-faiss")
        try:
            return await thread.run(index.search, vectors[41], 4)
        finally:
            await thread.close()

    found = asyncio.run(scenario())
    assert found == index.search(vectors[41], 4)
    assert found[0][0] == 42 and found[0][1] == pytest.approx(1.0, abs=1e-5)


def test_close_waits_for_calls_already_made_and_is_idempotent() -> None:
    async def scenario() -> bool:
        thread = FaissThread("deja-test-faiss")
        started, release = threading.Event(), threading.Event()

        def slow() -> bool:
            started.set()
            return release.wait(5)

        pending = thread.run(slow)
        await asyncio.to_thread(started.wait, 5)
        closing = asyncio.ensure_future(thread.close())
        await asyncio.sleep(0.05)
        assert not closing.done()
        release.set()
        await closing
        await thread.close()
        return await pending

    assert asyncio.run(scenario()) is True
