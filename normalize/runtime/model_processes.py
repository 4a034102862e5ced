"""spaCy and the sentence-transformer in child processes, fed in self-clocking batches.

Why processes and not threads: spaCy's pipeline and our analysis are Python code that holds the
GIL, and tokenization holds it too. In threads of the proxy they delay the event loop by up to
the GIL switch interval at every turn, so an exact-key hit (which needs neither model) waits
behind embedding work: measured here, exact-hit p99 went from 8 ms to 54 ms under 32 concurrent
semantic lookups. In child processes the proxy's event loop only does I/O.

Why several: the analysis and the embedding of a prompt run side by side in their own
processes (its latency is the slower of the two, not their sum). The embedding is bound by
arithmetic, not overhead (measured here: 10.7 ms for one text alone, 5.8 ms a text in batches
of 8, 6.9 ms in batches of 32), so batching alone gives it at most ~2× under load; a second
embedding process (`semantic.embedding_workers`) gives it a second core when there is one.

Batching: requests queue in the parent, one queue per model; whenever a worker has no batch in
flight, it gets a share of what is queued (at most `semantic.batch_max`), split evenly between
the idle workers. While they work the next batches fill, so batch size follows the load with no
timer on the hot path. Workers run at a lower CPU priority than the proxy (SCHED_IDLE, else
nice 19), so when the cores are contended the event loop (cache hits, streams) goes first.
Background texts (answers embedded for stored entries and for verification) wait until no
lookup is queued, go in small batches, and leave one worker of a pool of several free for
lookups.

If a worker dies, its waiting requests fail with FeatureWorkerUnavailable (callers then fall
back to exact matches) and it is started again in the background.

This module is the parent's side; a worker's own side (its environment, priority and serve
loop) is model_worker.py, and the sentence-transformer loads in sentence_encoder.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import multiprocessing
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from core.errors import DejaError
from core.semantic_config import SemanticConfig
from normalize.meaning.signature import Analysis
from normalize.runtime.model_worker import (
    ANALYZE,
    EMBED_KIND,
    EMBED_RESCORE,
    WorkerHello,
    run_worker,
    worker_environment,
)

_log = logging.getLogger("deja.features")

# Background texts (answers, often far longer than prompts) per batch.
_BACKGROUND_BATCH = 2
# Background texts that may wait at once. Under sustained lookups the background share of the
# workers can fall behind for good; past this many waiting, a new one is refused at once (its
# caller goes without an answer embedding) instead of holding its text and its waiting caller
# in memory for ever.
BACKGROUND_MAX = 4096


class FeatureWorkerUnavailable(DejaError):
    """No feature worker of a kind is running (starting, crashed, or closed)."""

    code = "feature_worker_unavailable"


@dataclass(frozen=True, slots=True)
class ParsedPrompt:
    """A prompt's analysis with its wire form and lemma-key material, as the worker made them."""

    analysis: Analysis
    wire: str
    key_material: str


@dataclass(slots=True)
class _Job:
    text: str
    future: asyncio.Future[Any]
    background: bool = False


@dataclass(slots=True)
class _Child:
    number: int
    process: multiprocessing.process.BaseProcess
    conn: Connection
    in_flight: dict[int, list[_Job]] = field(default_factory=dict)
    alive: bool = True


class WorkerPool:
    """`size` child processes running one model (`kind`: ANALYZE or EMBED), with batching."""

    def __init__(self, kind: str, config: SemanticConfig, size: int = 1) -> None:
        assert size >= 1, f"a worker pool needs at least one worker, got {size}"
        self._kind = kind
        self._config = config
        self._size = size
        self._children: list[_Child] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # Deques, taken from the left: a job whose caller gave up stays queued until it comes
        # up, and is skipped then; filtering the whole queue at every dispatch cost a
        # millisecond of event loop with a few thousand background texts waiting.
        self._queue: deque[_Job] = deque()
        self._background: deque[_Job] = deque()
        self._ids = itertools.count()
        self._closing = False
        self._restarting: set[int] = set()
        self.hello: WorkerHello | None = None
        self.batches = 0
        self.texts = 0
        self.restarts = 0
        self.background_refused = 0

    @property
    def queued(self) -> int:
        """Lookup texts waiting for a worker."""
        return len(self._queue)

    @property
    def background_queued(self) -> int:
        """Background texts waiting for a worker."""
        return len(self._background)

    @property
    def ready(self) -> bool:
        return any(child.alive for child in self._children)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._children = list(await asyncio.gather(*(self._spawn(n) for n in range(self._size))))

    async def _spawn(self, number: int) -> _Child:
        loop = asyncio.get_running_loop()
        # spawn, not fork: the parent runs an event loop and threads, which fork would copy.
        context = multiprocessing.get_context("spawn")
        parent, child_end = context.Pipe()
        # The worker's environment goes with it as an argument and is set by the worker itself
        # (model_worker.run_worker): nothing here writes this process's os.environ.
        process = context.Process(
            target=run_worker,
            args=(child_end, self._kind, self._config, worker_environment()),
            name=f"deja-{self._kind}-{number}",
            daemon=True,
        )
        process.start()
        child_end.close()
        try:
            self.hello = await loop.run_in_executor(None, parent.recv)
        except EOFError as exc:
            await asyncio.to_thread(process.join, 1)
            raise FeatureWorkerUnavailable(
                f"the {self._kind} worker exited while loading (code {process.exitcode})"
            ) from exc
        child = _Child(number, process, parent)
        # Results are read on the event loop when the pipe is readable: no reader thread to
        # take the GIL from the loop, no cross-thread wake-up per batch.
        loop.add_reader(parent.fileno(), self._read, child)
        return child

    async def close(self) -> None:
        self._closing = True
        self._fail_waiting(f"the {self._kind} workers were closed")
        for child in self._children:
            child.alive = False
            self._fail([j for batch in child.in_flight.values() for j in batch], "closed")
            self._forget(child)
        for child in self._children:
            await asyncio.to_thread(child.process.join, 5)
            if child.process.is_alive():
                child.process.kill()
                await asyncio.to_thread(child.process.join, 5)

    def submit(self, text: str, background: bool = False) -> asyncio.Future[Any]:
        """Queue `text`; `background` work (answers to embed for stored entries and for
        verification) runs only when no lookup is waiting, so it never delays a request."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self.ready:
            self._restart_dead()
            future.set_exception(FeatureWorkerUnavailable(f"no {self._kind} worker is running"))
            return future
        if background and len(self._background) >= BACKGROUND_MAX:
            self.background_refused += 1
            future.set_exception(
                FeatureWorkerUnavailable(f"{BACKGROUND_MAX} background texts already wait")
            )
            return future
        (self._background if background else self._queue).append(_Job(text, future, background))
        self._dispatch()
        return future

    def _dispatch(self) -> None:
        """Give idle workers an even share of what is queued: lookups first; background work
        in small batches, and never on the last idle worker of a pool of several, so a lookup
        that arrives meanwhile waits at most for one small batch."""
        idle = [c for c in self._children if c.alive and not c.in_flight]
        while idle:
            if _drop_abandoned(self._queue):
                share = min(self._config.batch_max, math.ceil(len(self._queue) / len(idle)))
                batch = _take(self._queue, share)
            elif not _drop_abandoned(self._background):
                return
            elif self._size == 1 or self._background_workers() < self._size - 1:
                batch = _take(self._background, _BACKGROUND_BATCH)
            else:
                return
            child = idle.pop()
            batch_id = next(self._ids)
            child.in_flight[batch_id] = batch
            try:
                child.conn.send((batch_id, [job.text for job in batch]))
            except (OSError, ValueError) as exc:
                self._died(child, f"sending to the {self._kind} worker failed: {exc}")

    def _background_workers(self) -> int:
        return sum(
            1
            for child in self._children
            if any(job.background for batch in child.in_flight.values() for job in batch)
        )

    def _read(self, child: _Child) -> None:
        assert self._loop is not None
        try:
            while child.conn.poll():
                self._deliver(child, child.conn.recv())
        except (EOFError, OSError):
            self._loop.remove_reader(child.conn.fileno())
            if not self._closing:
                self._died(child, f"the {self._kind} worker exited")

    def _deliver(self, child: _Child, message: tuple[int, list[Any] | str]) -> None:
        batch_id, results = message
        batch = child.in_flight.pop(batch_id, [])
        if isinstance(results, str):
            self._fail(batch, results)
        else:
            self.batches += 1
            self.texts += len(batch)
            self._release(list(zip(batch, list(results), strict=True)), 0)
        self._dispatch()

    def _release(self, done: list[tuple[_Job, Any]], index: int) -> None:
        """Hand out a batch's results one per turn of the event loop.

        Waking every waiter of a batch at once would queue all their continuations (a guard
        check, an upstream call, a store: a few hundred microseconds each) ahead of the next
        poll for I/O, and an exact-key hit arriving meanwhile would wait for all of them."""
        job, result = done[index]
        if not job.future.done():
            job.future.set_result(result)
        if index + 1 < len(done):
            assert self._loop is not None
            self._loop.call_soon(self._release, done, index + 1)

    def _forget(self, child: _Child) -> None:
        if not child.conn.closed:
            if self._loop is not None:
                self._loop.remove_reader(child.conn.fileno())
            child.conn.close()

    def _died(self, child: _Child, why: str) -> None:
        if not child.alive:
            return
        child.alive = False
        self._forget(child)
        _log.error("%s; restarting it", why)
        self._fail([job for batch in child.in_flight.values() for job in batch], why)
        child.in_flight.clear()
        if not self.ready:
            self._fail_waiting(why)
        self._restart_dead()
        self._dispatch()

    def _fail_waiting(self, why: str) -> None:
        """Fail every queued text, lookups and background alike, and empty the queues."""
        self._fail([*self._queue, *self._background], why)
        self._queue.clear()
        self._background.clear()

    @staticmethod
    def _fail(jobs: list[_Job], why: str) -> None:
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(FeatureWorkerUnavailable(why))

    def _restart_dead(self) -> None:
        if self._closing:
            return
        for index, child in enumerate(self._children):
            if not child.alive and index not in self._restarting:
                self._restarting.add(index)
                asyncio.get_running_loop().create_task(self._restart(index))

    async def _restart(self, index: int) -> None:
        self.restarts += 1
        try:
            self._children[index] = await self._spawn(index)
            _log.warning("the %s worker %d restarted", self._kind, index)
            self._dispatch()
        except FeatureWorkerUnavailable as exc:
            _log.error("restarting the %s worker failed: %s", self._kind, exc)
        finally:
            self._restarting.discard(index)


def _drop_abandoned(queue: deque[_Job]) -> bool:
    """Drop the jobs at the head whose caller gave up; True if a live one is left in front."""
    while queue and queue[0].future.done():
        queue.popleft()
    return bool(queue)


def _take(queue: deque[_Job], n: int) -> list[_Job]:
    """Up to n live jobs from the head of `queue` (at least one: its head is live)."""
    batch: list[_Job] = []
    while queue and len(batch) < n:
        job = queue.popleft()
        if not job.future.done():
            batch.append(job)
    return batch


class FeatureProcess:
    """The analysis workers and the embedding workers of each configured language, used
    together. One analysis pool reads every language (its worker dispatches by the language
    gate); each language embeds with its own model, in a pool of its own."""

    def __init__(self, config: SemanticConfig) -> None:
        self._analyzer = WorkerPool(ANALYZE, config, 1)
        self._embedders = {
            language: WorkerPool(
                EMBED_KIND[language], config, config.embedding_workers if i == 0 else 1
            )
            for i, language in enumerate(config.languages or ("en",))
        }
        # Two-stage: one process of the second English model (it sees a fraction of lookups).
        self._rescorer = WorkerPool(EMBED_RESCORE, config, 1) if config.two_stage else None

    @property
    def _pools(self) -> list[WorkerPool]:
        rescorer = [self._rescorer] if self._rescorer is not None else []
        return [self._analyzer, *self._embedders.values(), *rescorer]

    @property
    def rescore_dim(self) -> int:
        """The second English model's dimension; 0 in one-stage mode."""
        if self._rescorer is None:
            return 0
        assert self._rescorer.hello is not None, "the rescore worker has not started"
        return self._rescorer.hello.dim

    @property
    def ready(self) -> bool:
        return all(pool.ready for pool in self._pools)

    @property
    def dims(self) -> dict[str, int]:
        """The embedding dimension of each language's model."""
        dims = {}
        for language, pool in self._embedders.items():
            assert pool.hello is not None, f"the {language} embedding workers have not started"
            dims[language] = pool.hello.dim
        return dims

    @property
    def workers(self) -> dict[str, WorkerPool]:
        """Each pool by the name its statistics carry: analysis, embedding, embedding_zh."""
        named = {"analysis": self._analyzer}
        for language, pool in self._embedders.items():
            named["embedding" if language == "en" else f"embedding_{language}"] = pool
        if self._rescorer is not None:
            named["embedding_rescore"] = self._rescorer
        return named

    async def start(self) -> None:
        await asyncio.gather(*(pool.start() for pool in self._pools))

    async def close(self) -> None:
        await asyncio.gather(*(pool.close() for pool in self._pools))

    async def analyze(self, text: str, language: str) -> tuple[ParsedPrompt, np.ndarray]:
        """The lemma analysis and the normalized embedding of `text`, computed side by side;
        `language` (the gate's verdict) picks the embedding model."""
        (wire, key_material), vector = await asyncio.gather(
            self._analyzer.submit(text), self._embedders[language].submit(text)
        )
        return ParsedPrompt(Analysis.from_wire(wire), wire, key_material), vector

    async def embed(self, text: str, language: str, background: bool = False) -> np.ndarray:
        vector: np.ndarray = await self._embedders[language].submit(text, background)
        return vector

    async def rescore(self, text: str, background: bool = False) -> np.ndarray | None:
        """`text`'s vector by the second English model; None in one-stage mode."""
        if self._rescorer is None:
            return None
        vector: np.ndarray = await self._rescorer.submit(text, background)
        return vector
