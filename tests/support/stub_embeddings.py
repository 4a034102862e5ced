"""The stub upstream's embeddings, as OpenAI documents them: a deterministic float32 vector per
(model, dimensions, input), in `float` or `base64` encoding as the request asks.

The vectors come from a seeded generator, so no two inputs share one and the same input always
gets the same; the float encoding writes each float32 as the float64 it equals (`tolist()`, as
vLLM and most Python servers write them; OpenAI writes float32's shortest form, which reads
back as the same float32).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import numpy as np
import orjson

DEFAULT_DIMENSIONS = 24


def stub_vector(model: str, item: str | list[int], dimensions: int | None) -> np.ndarray:
    """The unit-length float32 vector the stub gives `item`. With `dimensions`, the full
    vector's first `dimensions` values, renormalized (as text-embedding-3 shortens)."""
    seed = hashlib.sha256(orjson.dumps([model, item])).digest()
    rng = np.random.default_rng(int.from_bytes(seed[:8], "little"))
    vector = rng.standard_normal(dimensions or DEFAULT_DIMENSIONS)  # a prefix of a longer draw
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def stub_tokens(item: str | list[int]) -> int:
    return len(item.split()) or 1 if isinstance(item, str) else len(item)


def embeddings_body(body: dict[str, Any]) -> tuple[int, bytes] | None:
    """(status, JSON body) of the stub's answer; None for an `input` it cannot read."""
    raw_input = body.get("input")
    if isinstance(raw_input, str) or (
        isinstance(raw_input, list) and raw_input and isinstance(raw_input[0], int)
    ):
        inputs: list[Any] = [raw_input]
    elif isinstance(raw_input, list) and raw_input:
        inputs = raw_input
    else:
        return None
    model = str(body.get("model"))
    dimensions = body.get("dimensions")
    base64_wanted = body.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        vector = stub_vector(model, item, dimensions)
        encoded: Any = (
            base64.b64encode(vector.tobytes()).decode() if base64_wanted else vector.tolist()
        )
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(stub_tokens(item) for item in inputs)
    answer = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return 200, orjson.dumps(answer)
