"""The semantic tier's sentence-transformer: `semantic.model_path` (or the default MiniLM) loaded
by the one loader, core/sentence_encoder.py, which the model server's `/v1/embeddings` uses too.

    load_sentence_encoder(config) ─► SentenceEncoder.encode(texts)
          │
          ├─ in each embedding worker process (model_worker.py): the proxy's request path,
          │  batched by the pool in model_processes.py
          └─ in process, blocking, on the caller's thread: benchmarks and model tests that
             need vectors synchronously (bench.quality, tests/models)
"""

from __future__ import annotations

from core.semantic_config import SemanticConfig
from core.sentence_encoder import (
    BULK_BATCH,
    SentenceEncoder,
    Vectors,
    default_model_path,
    load_sentence_model,
)

__all__ = [
    "BULK_BATCH",
    "SentenceEncoder",
    "Vectors",
    "default_model_path",
    "load_sentence_encoder",
    "model_path_of",
]


def model_path_of(config: SemanticConfig) -> str:
    """`semantic.model_path`, or the default model's package when it is empty."""
    return config.model_path or str(default_model_path())


def load_sentence_encoder(config: SemanticConfig) -> SentenceEncoder:
    """Load the configured model on the calling thread (blocking, seconds), with
    `semantic.torch_threads` torch threads."""
    return load_sentence_model(model_path_of(config), config.torch_threads)
