"""How the feature worker pool hands out work: lookups before background texts (answers to
embed), background in small batches and never on the last idle worker. The pipe to each child
process is the faked seam; the dispatch policy is the real one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.semantic_config import SemanticConfig
from normalize.runtime.model_processes import (
    BACKGROUND_MAX,
    FeatureWorkerUnavailable,
    WorkerPool,
    _Child,
)
from normalize.runtime.model_worker import EMBED


class Pipe:
    def __init__(self, log: list[list[str]]) -> None:
        self.sent: list[tuple[int, list[str]]] = []
        self.closed = False
        self._log = log  # every pipe's batches, in the order they were sent

    def send(self, message: tuple[int, list[str]]) -> None:
        self.sent.append(message)
        self._log.append(message[1])

    def fileno(self) -> int:
        return 10_000  # never registered with the loop: removing its reader is a no-op

    def close(self) -> None:
        self.closed = True


def pool_of(size: int) -> tuple[WorkerPool, list[Pipe]]:
    pool = WorkerPool(EMBED, SemanticConfig(), size)
    pool._loop = asyncio.get_running_loop()
    log: list[list[str]] = []
    pipes = [Pipe(log) for _ in range(size)]
    pool._children = [_Child(n, None, pipe) for n, pipe in enumerate(pipes)]  # type: ignore[arg-type]
    return pool, pipes


def texts(pipes: list[Pipe]) -> list[list[str]]:
    return pipes[0]._log


def finish(pool: WorkerPool, pipe: Pipe, number: int) -> None:
    batch_id, batch = pipe.sent[-1]
    results: list[Any] = [f"v:{t}" for t in batch]
    pool._deliver(pool._children[number], (batch_id, results))


async def test_background_work_leaves_one_worker_free_for_lookups() -> None:
    pool, pipes = pool_of(2)
    answers = [pool.submit(f"answer {i}", background=True) for i in range(5)]
    # The first went at once (batches clock themselves); the rest wait: one worker stays free.
    assert texts(pipes) == [["answer 0"]]
    lookup = pool.submit("a prompt")
    assert texts(pipes)[-1] == ["a prompt"]  # straight to the worker kept free
    busy_with_answers = next(n for n, p in enumerate(pipes) if p.sent[0][1][0] == "answer 0")
    finish(pool, pipes[busy_with_answers], busy_with_answers)
    assert texts(pipes)[-1] == ["answer 1", "answer 2"]  # small batches
    await asyncio.sleep(0)
    assert answers[0].result() == "v:answer 0" and not lookup.done()


async def test_queued_lookups_go_before_queued_background_work() -> None:
    pool, pipes = pool_of(1)
    first = pool.submit("first prompt")
    pool.submit("an answer", background=True)
    pool.submit("second prompt")
    pool.submit("third prompt")
    assert texts(pipes) == [["first prompt"]]
    finish(pool, pipes[0], 0)
    assert texts(pipes)[-1] == ["second prompt", "third prompt"]
    finish(pool, pipes[0], 0)
    assert texts(pipes)[-1] == ["an answer"]
    await asyncio.sleep(0)
    assert first.result() == "v:first prompt"


async def test_texts_whose_callers_gave_up_are_skipped_not_sent() -> None:
    pool, pipes = pool_of(1)
    pool.submit("first prompt")
    gone = [pool.submit(f"abandoned {i}") for i in range(3)]
    kept = pool.submit("still wanted")
    for future in gone:
        future.cancel()
    gone_answer = pool.submit("abandoned answer", background=True)
    gone_answer.cancel()
    pool.submit("wanted answer", background=True)
    finish(pool, pipes[0], 0)
    assert texts(pipes)[-1] == ["still wanted"]
    finish(pool, pipes[0], 0)
    assert texts(pipes)[-1] == ["wanted answer"]
    await asyncio.sleep(0)
    assert kept.result() == "v:still wanted"
    assert pool.queued == 0 and pool.background_queued == 0


async def test_background_texts_past_the_bound_are_refused_at_once() -> None:
    pool, _ = pool_of(1)
    pool.submit("a prompt")  # the worker is busy: everything after it waits
    waiting = [pool.submit(f"answer {i}", background=True) for i in range(BACKGROUND_MAX)]
    refused = pool.submit("one answer too many", background=True)
    with pytest.raises(FeatureWorkerUnavailable):
        refused.result()
    assert pool.background_refused == 1 and pool.background_queued == BACKGROUND_MAX
    lookup = pool.submit("a lookup is never refused for it")
    assert not lookup.done() and not any(f.done() for f in waiting)


async def test_when_the_last_worker_dies_every_waiting_text_fails() -> None:
    pool, _ = pool_of(1)
    pool._restarting = {0}  # a restart is already under way: none is spawned here
    in_flight = pool.submit("a prompt")
    waiting = [pool.submit("another prompt"), pool.submit("an answer", background=True)]
    pool._died(pool._children[0], "the embed worker exited")
    for future in [in_flight, *waiting]:
        with pytest.raises(FeatureWorkerUnavailable, match="exited"):
            future.result()
    assert pool.queued == 0 and pool.background_queued == 0
