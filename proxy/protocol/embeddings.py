"""The embeddings wire format (OpenAI's `POST /v1/embeddings`): the request's inputs and keys,
the upstream's vectors, and the response Deja writes.

Vectors are float32 bytes (little-endian, as OpenAI's base64 encoding carries them) from the
moment they arrive until they are written out, so what is stored and served is exactly what the
upstream gave: base64 decoded as is, JSON floats read as the float32 values they print (OpenAI
prints each float32 in its shortest form; float64 → float32 recovers it exactly). A response
is written in the encoding the request asks (`float`, the API's default, or `base64`, what the
OpenAI SDKs ask for), whatever the upstream was asked: either way a client reads the same float32
values.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from core.errors import InvalidRequest, UpstreamProtocolError
from normalize.keys.embedding import EmbeddingInput, embedding_requests
from normalize.keys.request import CacheRequest
from proxy.protocol.directives import CacheDirectives, parse_directives

ENCODINGS = ("float", "base64")
_FLOAT32 = np.dtype("<f4")


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    body: dict[str, Any]
    directives: CacheDirectives
    # In the request's order; `keys[i]` is the CacheRequest of `inputs[i]`.
    inputs: tuple[EmbeddingInput, ...]
    keys: tuple[CacheRequest, ...]
    encoding: str

    def upstream_body(self, inputs: Sequence[EmbeddingInput]) -> dict[str, Any]:
        """This request for `inputs` only, asking for base64 (exact float32, and compact)."""
        wire: list[Any] = [item if isinstance(item, str) else list(item) for item in inputs]
        return {**self.body, "input": wire, "encoding_format": "base64"}


@dataclass(frozen=True, slots=True)
class UpstreamEmbeddings:
    """A 2xx embeddings answer: one float32 vector per input sent, in that order."""

    vectors: tuple[bytes, ...]
    model: str
    prompt_tokens: int
    total_tokens: int


def parse_embeddings_request(
    body: dict[str, Any], tenant: str, headers: Mapping[str, str]
) -> EmbeddingsRequest:
    """Validated inputs and their keys; 400 naming the field for anything Deja cannot key."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest(
            "'model' is required and must be a non-empty string",
            code="missing_model",
            param="model",
        )
    encoding = body.get("encoding_format")
    if encoding is None:
        encoding = "float"
    if encoding not in ENCODINGS:
        raise InvalidRequest(
            "'encoding_format' must be 'float' or 'base64'", param="encoding_format"
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1
    ):
        raise InvalidRequest("'dimensions' must be a positive integer", param="dimensions")
    inputs = _inputs(body.get("input"))
    directives = parse_directives(headers)
    keys = embedding_requests(body, inputs, tenant, directives.namespace)
    return EmbeddingsRequest(body, directives, inputs, keys, encoding)


def _inputs(value: Any) -> tuple[EmbeddingInput, ...]:
    """The batch's inputs: a single string or token array is a batch of one."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return tuple(value)
        if all(_is_token(v) for v in value):
            return (tuple(value),)
        if all(isinstance(v, list) and v and all(_is_token(t) for t in v) for v in value):
            return tuple(tuple(v) for v in value)
    raise InvalidRequest(
        "'input' is required: a string, an array of strings, an array of token ids, or an"
        " array of non-empty token arrays",
        code="missing_input",
        param="input",
    )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_upstream_embeddings(raw: bytes, sent: int) -> UpstreamEmbeddings:
    """The vectors of a 2xx answer to `sent` inputs; UpstreamProtocolError (502) when it is
    not one: Deja cannot tell which vector answers which input, so it stores none."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError(f"the upstream's embeddings are not JSON: {exc}") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or len(data) != sent:
        got = len(data) if isinstance(data, list) else "no"
        raise UpstreamProtocolError(f"the upstream sent {got} embeddings for {sent} inputs")
    vectors: list[bytes | None] = [None] * sent
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, dict) else None
        if not isinstance(index, int) or not 0 <= index < sent or vectors[index] is not None:
            raise UpstreamProtocolError(f"the upstream's embedding {position} has a bad index")
        vectors[index] = _vector_bytes(item.get("embedding"))
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    prompt_tokens = _count(usage.get("prompt_tokens"))
    return UpstreamEmbeddings(
        vectors=tuple(v for v in vectors if v is not None),
        model=str(body.get("model") or ""),
        prompt_tokens=prompt_tokens,
        total_tokens=_count(usage.get("total_tokens")) or prompt_tokens,
    )


def _vector_bytes(embedding: Any) -> bytes:
    if isinstance(embedding, str):
        try:
            raw = base64.b64decode(embedding, validate=True)
        except binascii.Error as exc:
            raise UpstreamProtocolError(f"an upstream embedding is not base64: {exc}") from None
        if not raw or len(raw) % 4:
            raise UpstreamProtocolError("an upstream embedding is not float32 values")
        return raw
    if isinstance(embedding, list) and embedding:
        try:
            return np.asarray(embedding, dtype=np.float64).astype(_FLOAT32).tobytes()
        except (TypeError, ValueError):
            pass
    raise UpstreamProtocolError("an upstream embedding is neither base64 nor an array of numbers")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def render_embeddings(
    vectors: Sequence[bytes], encoding: str, model: str, prompt_tokens: int, total_tokens: int
) -> bytes:
    """The response body: OpenAI's list object, vectors in `encoding`."""
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(vector, encoding)}
        for i, vector in enumerate(vectors)
    ]
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": total_tokens}
    body = {"object": "list", "data": data, "model": model, "usage": usage}
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def _encoded(vector: bytes, encoding: str) -> str | np.ndarray:
    if encoding == "base64":
        return base64.b64encode(vector).decode("ascii")
    # Each float32 widened to the float64 it equals exactly, which orjson writes in full
    # (0.1f as 0.10000000149011612): what a client parses is that float32's value itself,
    # as the SDKs' base64 decoding gives it (and as vLLM's or any `tolist()` upstream writes
    # it). float32's shortest form (0.1, OpenAI's) would read back as another float64.
    return np.frombuffer(vector, dtype=_FLOAT32).astype(np.float64)
