"""The keys of an embeddings request: one exact key per input, never anything looser.

    partition = H(version, "embeddings", tenant, namespace,
                  every request field except `input` and EMBEDDING_EXCLUDED_FIELDS)
    exact_key = tag(partition) + H(partition, kind of input, the input's bytes exactly)

`model` and `dimensions` are in the partition (with any field Deja does not know, as for
chat); `encoding_format` is not: Deja stores the float32 values and encodes them as each request
asks. A string input is keyed by its UTF-8 bytes as sent (no canonical form: an embedding of
"Hello " is not the embedding of "Hello"), a token array by its ids, and the two kinds never
share a key. No lemma key, no semantic match: the embedding of a paraphrase is not the
paraphrase's embedding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from normalize.keys.fingerprint import canonical_json, derived_key
from normalize.keys.request import CacheRequest, Route

# Fields that change no vector: how it is written out, and who asked.
EMBEDDING_EXCLUDED_FIELDS = frozenset({"input", "encoding_format", "user"})
_KEY_VERSION = 1

# One input of a batch: a string, or an array of token ids.
EmbeddingInput = str | tuple[int, ...]


def embedding_partition(body: Mapping[str, Any], tenant: str, namespace: str) -> str:
    """The partition every input of this request is keyed in."""
    keyed = {}
    for name, value in body.items():
        if name in EMBEDDING_EXCLUDED_FIELDS:
            continue
        keyed[name] = int(value) if isinstance(value, float) and value.is_integer() else value
    header = [_KEY_VERSION, str(Route.EMBEDDINGS), tenant, namespace, keyed]
    return hashlib.sha256(canonical_json(header)).hexdigest()


def embedding_requests(
    body: Mapping[str, Any], inputs: Sequence[EmbeddingInput], tenant: str, namespace: str
) -> tuple[CacheRequest, ...]:
    """One CacheRequest per input, in the request's order (equal inputs, equal keys)."""
    partition = embedding_partition(body, tenant, namespace)
    model = str(body.get("model", ""))
    return tuple(
        CacheRequest(
            route=Route.EMBEDDINGS,
            tenant=tenant,
            namespace=namespace,
            model=model,
            partition=partition,
            exact_key=_input_key(partition, item),
            prompt_text=None,
            stream=False,
            include_usage=False,
        )
        for item in inputs
    )


def _input_key(partition: str, item: EmbeddingInput) -> str:
    if isinstance(item, str):
        return derived_key(partition, "text", item)
    return derived_key(partition, "tokens", ",".join(map(str, item)))
