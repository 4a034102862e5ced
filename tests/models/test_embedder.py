"""The embedder with the real all-MiniLM-L6-v2: vectors, micro-batching, lifecycle."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np
import pytest

from core.config import SemanticConfig
from normalize.runtime.embedder import Embedder, EmbedderClosed, default_model_path
from tests.support.float_tolerance import float32_tolerance


@pytest.fixture
async def embedder(config: SemanticConfig) -> AsyncIterator[Embedder]:
    embedder = Embedder(config)
    await embedder.start()
    yield embedder
    await embedder.close()


async def test_vectors_are_unit_float32(embedder: Embedder) -> None:
    vector = await embedder.embed("Who wrote Hamlet?")
    assert vector.dtype == np.float32
    assert vector.shape == (embedder.dim,) == (384,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


async def test_concurrent_calls_share_encode_calls(embedder: Embedder) -> None:
    texts = [f"How do I reset password number {i}?" for i in range(64)]
    vectors = await asyncio.gather(*(embedder.embed(t) for t in texts))
    # 64 concurrent requests in batches of at most batch_max (32): a handful of encodes.
    assert embedder.texts == 64
    assert embedder.batches <= 8
    expected = embedder.embed_many(texts)
    # Other batches pad to other lengths and sum in other shapes: equal within float32's bound
    # for all-MiniLM-L6-v2 (6 layers, sums of up to 1536 terms), on unit vectors.
    tolerance = float32_tolerance(sum_length=1536, num_layers=6, scale=1.0)
    assert float(np.abs(np.stack(vectors) - expected).max()) <= tolerance


async def test_a_lone_request_is_not_delayed_by_batching(config: SemanticConfig) -> None:
    embedder = Embedder(replace(config, batch_wait_ms=500.0))
    await embedder.start()
    try:
        await embedder.embed("warm up")
        started = time.perf_counter()
        await embedder.embed("Who wrote Hamlet?")
        assert time.perf_counter() - started < 0.4  # never waited the 500 ms for company
    finally:
        await embedder.close()


async def test_encoding_runs_off_the_event_loop(embedder: Embedder) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.gather(*(embedder.embed("a long question " * 20) for _ in range(32)))
    task.cancel()
    assert embedder.last_encode_thread.startswith("deja-embed")
    assert threading.current_thread().name != embedder.last_encode_thread
    assert ticks > 0  # the loop kept turning while the model worked


async def test_throughput_grows_with_concurrency(embedder: Embedder) -> None:
    texts = [f"What is the best way to learn language number {i}?" for i in range(32)]
    await embedder.embed("warm up")
    started = time.perf_counter()
    for text in texts:
        await embedder.embed(text)
    sequential_s = time.perf_counter() - started
    started = time.perf_counter()
    await asyncio.gather(*(embedder.embed(t) for t in texts))
    concurrent_s = time.perf_counter() - started
    # The target for whole lookups is ≥ 2.5×; the embedder alone must clear it.
    print(f"concurrency 32 vs 1: {sequential_s / concurrent_s:.1f}x")
    assert sequential_s / concurrent_s >= 2.5, (sequential_s, concurrent_s)


async def test_close_fails_waiting_and_later_calls(config: SemanticConfig) -> None:
    embedder = Embedder(config)
    with pytest.raises(EmbedderClosed):
        await embedder.embed("not started")
    await embedder.start()
    waiting = [asyncio.create_task(embedder.embed(f"question {i}")) for i in range(100)]
    await asyncio.sleep(0)
    await embedder.close()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(r, np.ndarray | EmbedderClosed) for r in results)
    with pytest.raises(EmbedderClosed):
        await embedder.embed("closed")


async def test_cancelled_callers_do_not_break_the_batch(embedder: Embedder) -> None:
    doomed = asyncio.create_task(embedder.embed("never mind"))
    kept = asyncio.create_task(embedder.embed("Who wrote Hamlet?"))
    doomed.cancel()
    vector = await kept
    assert vector.shape == (384,)


def test_model_path_is_configurable(config: SemanticConfig) -> None:
    embedder = Embedder(replace(config, model_path=str(default_model_path())))
    vectors = embedder.embed_many(["Who wrote Hamlet?", "Who is the author of Hamlet?"])
    assert vectors.shape == (2, 384)
    assert float(vectors[0] @ vectors[1]) > 0.9
    assert embedder.embed_many([]).shape == (0, 384)
