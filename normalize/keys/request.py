"""The typed values that normalization produces and every later stage reads."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Route(StrEnum):
    """The cached OpenAI routes."""

    CHAT = "chat"  # POST /v1/chat/completions
    COMPLETIONS = "completions"  # POST /v1/completions (legacy; exact matches only)
    RESPONSES = "responses"  # POST /v1/responses
    EMBEDDINGS = "embeddings"  # POST /v1/embeddings (each input exactly, on its own)


# Every key Deja hashes starts with this many hex characters of its partition. Redis uses them
# as the hash tag, so all of a partition's records live in one Redis Cluster slot.
PARTITION_TAG_CHARS = 16


@dataclass(frozen=True, slots=True)
class CacheRequest:
    """What the cache needs to know about one request, derived once by `normalize`.

    `partition` covers everything that must match exactly: tenant, namespace, route, model, every
    output-changing request field, the system prompt and the history before the last user turn.
    `exact_key` adds the canonical text of the last user turn. `prompt_text` is that turn's raw
    text when the semantic tier may be used (a plain-text user turn is last), otherwise None and
    the whole input is in the keys.
    """

    route: Route
    tenant: str
    namespace: str
    model: str
    partition: str
    exact_key: str
    prompt_text: str | None
    stream: bool
    include_usage: bool
    # /v1/responses with `store` not false: the upstream keeps the response, and its id can be
    # continued from (`previous_response_id`) and fetched. A hit then carries the stored
    # response's own id; otherwise a fresh one.
    upstream_keeps: bool = False

    @property
    def semantic_eligible(self) -> bool:
        return self.prompt_text is not None

    @property
    def tag(self) -> str:
        return self.partition[:PARTITION_TAG_CHARS]
