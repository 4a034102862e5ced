"""The embedding runtime with the real all-MiniLM-L6-v2: the proxy's embedding workers (child
processes fed in self-clocking batches) and the same encoder loaded in process: vectors,
batching, lifecycle."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from core.semantic_config import SemanticConfig
from normalize.runtime.model_processes import FeatureWorkerUnavailable, WorkerPool
from normalize.runtime.model_worker import EMBED
from normalize.runtime.sentence_encoder import (
    SentenceEncoder,
    default_model_path,
    load_sentence_encoder,
)
from tests.support.float_tolerance import float32_tolerance

# Starting the workers (two processes, each importing torch and loading MiniLM at idle priority)
# takes seconds, so the tests that need no fresh pool share one, on the module's event loop.
on_module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def workers(config: SemanticConfig) -> AsyncIterator[WorkerPool]:
    pool = WorkerPool(EMBED, config, config.embedding_workers)
    await pool.start()
    yield pool
    await pool.close()


async def embed(pool: WorkerPool, text: str) -> np.ndarray:
    vector: np.ndarray = await pool.submit(text)
    return vector


@on_module_loop
async def test_vectors_are_unit_float32(workers: WorkerPool) -> None:
    vector = await embed(workers, "Who wrote Hamlet?")
    assert vector.dtype == np.float32
    assert workers.hello is not None
    assert vector.shape == (workers.hello.dim,) == (384,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


@on_module_loop
async def test_concurrent_calls_share_encode_calls(
    workers: WorkerPool, config: SemanticConfig, sentence_encoder: SentenceEncoder
) -> None:
    texts = [f"How do I reset password number {i}?" for i in range(64)]
    texts_before, batches_before = workers.texts, workers.batches  # the pool is shared
    vectors = await asyncio.gather(*(embed(workers, t) for t in texts))
    # 64 concurrent requests: each idle worker takes the first at once (no timer), the rest
    # queue and go in batches of at most batch_max (8): a handful of encodes, not 64.
    assert workers.texts - texts_before == 64
    batches = workers.batches - batches_before
    assert batches <= math.ceil(64 / config.batch_max) + config.embedding_workers
    expected = sentence_encoder.encode(texts)
    # Other batches pad to other lengths and sum in other shapes: equal within float32's bound
    # for all-MiniLM-L6-v2 (6 layers, sums of up to 1536 terms), on unit vectors.
    tolerance = float32_tolerance(sum_length=1536, num_layers=6, scale=1.0)
    assert float(np.abs(np.stack(vectors) - expected).max()) <= tolerance


@on_module_loop
async def test_a_lone_request_is_not_delayed_by_batching(workers: WorkerPool) -> None:
    await embed(workers, "warm up")
    started = time.perf_counter()
    await embed(workers, "Who wrote Hamlet?")
    assert time.perf_counter() - started < 0.4  # never waited for company


@on_module_loop
async def test_encoding_runs_off_the_event_loop(workers: WorkerPool) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.gather(*(embed(workers, "a long question " * 20) for _ in range(32)))
    task.cancel()
    assert workers.hello is not None
    assert workers.hello.process_name.startswith("deja-embed")
    assert workers.hello.pid != os.getpid()
    assert ticks > 0  # the loop kept turning while the model worked


async def test_a_worker_names_its_role_where_ps_looks(workers: WorkerPool) -> None:
    """Its command line is multiprocessing's; its kernel name says what it is (ps, top, and
    the soak's per-process RSS read it)."""
    assert workers.hello is not None
    comm = Path(f"/proc/{workers.hello.pid}/comm")
    if not await asyncio.to_thread(comm.exists):
        pytest.skip("no /proc here")
    name = (await asyncio.to_thread(comm.read_text)).strip()
    assert name == workers.hello.process_name[:15]
    assert name.startswith("deja-embed-")  # deja-<kind>-<number>


@on_module_loop
async def test_throughput_grows_with_concurrency(workers: WorkerPool) -> None:
    texts = [f"What is the best way to learn language number {i}?" for i in range(32)]
    await embed(workers, "warm up")
    started = time.perf_counter()
    for text in texts:
        await embed(workers, text)
    sequential_s = time.perf_counter() - started
    started = time.perf_counter()
    await asyncio.gather(*(embed(workers, t) for t in texts))
    concurrent_s = time.perf_counter() - started
    # The target for whole lookups is ≥ 2.5×; the embedder alone must clear it.
    print(f"concurrency 32 vs 1: {sequential_s / concurrent_s:.1f}x")
    assert sequential_s / concurrent_s >= 2.5, (sequential_s, concurrent_s)


@on_module_loop
async def test_close_fails_waiting_and_later_calls(config: SemanticConfig) -> None:
    environment_before = dict(os.environ)
    pool = WorkerPool(EMBED, config, config.embedding_workers)
    with pytest.raises(FeatureWorkerUnavailable):
        await embed(pool, "not started")
    await pool.start()
    waiting = [asyncio.create_task(embed(pool, f"question {i}")) for i in range(100)]
    await asyncio.sleep(0)
    await pool.close()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(r, np.ndarray | FeatureWorkerUnavailable) for r in results)
    with pytest.raises(FeatureWorkerUnavailable):
        await embed(pool, "closed")
    # Each worker set its own environment (model_worker.run_worker); ours is as it was.
    assert dict(os.environ) == environment_before


@on_module_loop
async def test_cancelled_callers_do_not_break_the_batch(workers: WorkerPool) -> None:
    doomed = asyncio.create_task(embed(workers, "never mind"))
    kept = asyncio.create_task(embed(workers, "Who wrote Hamlet?"))
    doomed.cancel()
    vector = await kept
    assert vector.shape == (384,)


def test_the_model_may_be_a_folder(config: SemanticConfig) -> None:
    encoder = load_sentence_encoder(replace(config, model=str(default_model_path())))
    vectors = encoder.encode(["Who wrote Hamlet?", "Who is the author of Hamlet?"])
    assert vectors.shape == (2, 384)
    assert float(vectors[0] @ vectors[1]) > 0.9
    assert encoder.encode([]).shape == (0, 384)
