"""spaCy and the sentence-transformer in two child processes, fed in self-clocking batches.

Why processes and not threads: spaCy's pipeline and our analysis are Python code that holds the
GIL, and tokenization holds it too. In threads of the proxy they delay the event loop by up to
the GIL switch interval at every turn, so an exact-key hit (which needs neither model) waits
behind embedding work: measured here, exact-hit p99 went from 8 ms to 54 ms under 32 concurrent
semantic lookups. In child processes the proxy's event loop only does I/O.

Why two: the parser and the encoder each keep a core busy under load. In one process they
fight over one GIL; in two, each has its own, and a prompt's analysis and embedding are computed
side by side (its latency is the slower of the two, not their sum).

Batching: requests queue in the parent per worker; whenever a worker has no batch in flight,
everything queued (up to `semantic.batch_max`) goes to it as one batch (`nlp.pipe`, or one
`encode` call). While it works, the next batch fills, so batch size follows the load with no
timer on the hot path. The workers run at lower CPU priority than the proxy (nice 10), so when
the cores are contended the event loop (cache hits, streams) goes first.

If a worker dies, its waiting requests fail with FeatureWorkerUnavailable (callers then fall
back to exact matches) and the next request starts a new one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from core.config import SemanticConfig
from core.errors import DejaError
from normalize.meaning import Analysis

_log = logging.getLogger("deja.features")

ANALYZE, EMBED = "analyze", "embed"
# How much lower than the proxy the models run in CPU priority.
NICENESS = 10


class FeatureWorkerUnavailable(DejaError):
    """A feature worker is not running (starting, crashed, or closed)."""

    code = "feature_worker_unavailable"


@dataclass(slots=True)
class _Job:
    text: str
    future: asyncio.Future[Any]


class WorkerProcess:
    """One model in one child process (`kind`: ANALYZE or EMBED), with batching and restarts."""

    def __init__(self, kind: str, config: SemanticConfig) -> None:
        self._kind = kind
        self._config = config
        self._conn: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: list[_Job] = []
        self._in_flight: dict[int, list[_Job]] = {}
        self._ids = itertools.count()
        self._closing = False
        self._restart: asyncio.Task[None] | None = None
        self.hello: Any = None
        self.batches = 0
        self.texts = 0
        self.restarts = 0

    @property
    def ready(self) -> bool:
        return self._conn is not None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # spawn, not fork: the parent runs an event loop and threads, which fork would copy.
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(
            target=_serve,
            args=(child, self._kind, self._config),
            name=f"deja-{self._kind}",
            daemon=True,
        )
        process.start()
        child.close()
        try:
            self.hello = await self._loop.run_in_executor(None, parent.recv)
        except EOFError as exc:
            await asyncio.to_thread(process.join, 1)
            raise FeatureWorkerUnavailable(
                f"the {self._kind} worker exited while loading (code {process.exitcode})"
            ) from exc
        self._process, self._conn = process, parent
        reader = threading.Thread(
            target=self._read, args=(parent,), name=f"deja-{self._kind}-reader", daemon=True
        )
        reader.start()
        self._dispatch()

    async def close(self) -> None:
        self._closing = True
        conn, process = self._conn, self._process
        self._conn = None
        self._fail_all(f"the {self._kind} worker was closed")
        if conn is not None:
            conn.close()
        if process is not None:
            await asyncio.to_thread(process.join, 5)
            if process.is_alive():
                process.kill()
                await asyncio.to_thread(process.join, 5)

    def submit(self, text: str) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._conn is None:
            self._ensure_restart()
            future.set_exception(
                FeatureWorkerUnavailable(f"the {self._kind} worker is not running")
            )
            return future
        self._queue.append(_Job(text, future))
        self._dispatch()
        return future

    def _dispatch(self) -> None:
        """Send what is queued, unless a batch is already in the worker."""
        while not self._in_flight and self._queue and self._conn is not None:
            batch = [job for job in self._queue[: self._config.batch_max] if not job.future.done()]
            del self._queue[: self._config.batch_max]
            if not batch:
                continue  # every caller of that slice left already
            batch_id = next(self._ids)
            self._in_flight[batch_id] = batch
            try:
                self._conn.send((batch_id, [job.text for job in batch]))
            except (OSError, ValueError) as exc:
                self._died(f"sending to the {self._kind} worker failed: {exc}")

    def _read(self, conn: Connection) -> None:
        # A thread, so the event loop never blocks in recv(); it hands each result back.
        assert self._loop is not None
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                if not self._closing:
                    self._loop.call_soon_threadsafe(self._died, f"the {self._kind} worker exited")
                return
            self._loop.call_soon_threadsafe(self._deliver, message)

    def _deliver(self, message: tuple[int, list[Any] | str]) -> None:
        batch_id, results = message
        batch = self._in_flight.pop(batch_id, [])
        if isinstance(results, str):
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(FeatureWorkerUnavailable(results))
        else:
            self.batches += 1
            self.texts += len(batch)
            for job, result in zip(batch, results, strict=True):
                if not job.future.done():
                    job.future.set_result(result)
        self._dispatch()

    def _died(self, why: str) -> None:
        if self._conn is None:
            return
        _log.error("%s; semantic matching is off until it restarts", why)
        self._conn = None
        self._fail_all(why)

    def _fail_all(self, why: str) -> None:
        jobs = [job for batch in self._in_flight.values() for job in batch] + self._queue
        self._in_flight.clear()
        self._queue.clear()
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(FeatureWorkerUnavailable(why))

    def _ensure_restart(self) -> None:
        if self._closing or (self._restart is not None and not self._restart.done()):
            return
        self._restart = asyncio.get_running_loop().create_task(self._restart_worker())

    async def _restart_worker(self) -> None:
        self.restarts += 1
        try:
            await self.start()
            _log.warning("the %s worker restarted", self._kind)
        except FeatureWorkerUnavailable as exc:
            _log.error("restarting the %s worker failed: %s", self._kind, exc)


class FeatureProcess:
    """The analysis worker and the embedding worker, used together."""

    def __init__(self, config: SemanticConfig) -> None:
        self._analyzer = WorkerProcess(ANALYZE, config)
        self._embedder = WorkerProcess(EMBED, config)

    @property
    def ready(self) -> bool:
        return self._analyzer.ready and self._embedder.ready

    @property
    def dim(self) -> int:
        assert self._embedder.hello is not None, "the embedding worker has not started"
        return int(self._embedder.hello[1])

    @property
    def workers(self) -> tuple[WorkerProcess, WorkerProcess]:
        return self._analyzer, self._embedder

    async def start(self) -> None:
        await asyncio.gather(self._analyzer.start(), self._embedder.start())

    async def close(self) -> None:
        await asyncio.gather(self._analyzer.close(), self._embedder.close())

    async def analyze(self, text: str) -> tuple[Analysis, np.ndarray]:
        """The lemma analysis and the normalized embedding of `text`, computed side by side."""
        analysis, vector = await asyncio.gather(
            self._analyzer.submit(text), self._embedder.submit(text)
        )
        return analysis, vector

    async def embed(self, text: str) -> np.ndarray:
        vector: np.ndarray = await self._embedder.submit(text)
        return vector


def _serve(conn: Connection, kind: str, config: SemanticConfig) -> None:
    """A child: load its model, then answer batches until the pipe closes."""
    os.nice(NICENESS)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if kind == ANALYZE:
        from normalize.lemmas import LemmaAnalyzer

        analyzer = LemmaAnalyzer(config)
        conn.send(("ready", 0))
        run = analyzer.analyze_many
    else:
        import torch
        from sentence_transformers import SentenceTransformer

        from normalize.embedder import default_model_path

        torch.set_num_threads(config.torch_threads)
        model = SentenceTransformer(config.model_path or str(default_model_path()), device="cpu")
        model.eval()
        conn.send(("ready", model.get_embedding_dimension()))

        def run(texts: Sequence[str]) -> list[Any]:
            vectors = model.encode(list(texts), batch_size=len(texts), normalize_embeddings=True)
            return list(np.asarray(vectors, dtype=np.float32))

    while True:
        try:
            batch_id, texts = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send((batch_id, run(texts)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the batch
            conn.send((batch_id, f"the {kind} worker failed on a batch: {exc!r}"))
