"""Per-request facts gathered along the way, for the response headers and the access log."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from aiohttp import web

from core.recorder import GuardName
from tiers.base import LookupExplanation


class CacheOutcome(StrEnum):
    HIT = "hit"
    # /v1/embeddings: some of the batch's inputs were cached, the rest went upstream.
    PARTIAL = "partial"
    MISS = "miss"
    BYPASS = "bypass"
    DEGRADED = "degraded"


@dataclass(slots=True)
class RequestContext:
    request_id: str
    route: str
    started_s: float
    tenant: str = ""
    cache: CacheOutcome | None = None
    tier: str | None = None
    match: str | None = None
    degraded: str | None = None
    similarity: float | None = None
    entry_id: str | None = None
    ttl_s: float | None = None
    age_s: float | None = None
    coalesced: bool = False
    upstream_status: int | None = None
    error_code: str | None = None
    # Edge mode: the worker answered this request (and counts it); the front only relayed it.
    # Set once the worker's answer arrives: a 503 for a worker not answering is the front's.
    relayed: bool = False
    # Why the lookup hit or missed, when the client asked (X-Deja-Explain).
    explanation: LookupExplanation | None = None
    # /v1/embeddings: (inputs answered from the cache, inputs in the batch).
    inputs_cached: tuple[int, int] | None = None

    def cache_headers(self) -> dict[str, str]:
        """X-Request-Id and the X-Deja-* headers of DESIGN.md's table for what happened to this
        request; responses prepared (streamed) inside a handler send exactly these."""
        headers: dict[str, str] = {"X-Request-Id": self.request_id}
        if self.cache is not None:
            headers["X-Deja-Cache"] = str(self.cache)
        if self.tier is not None:
            headers["X-Deja-Tier"] = self.tier
        if self.match is not None:
            headers["X-Deja-Match"] = self.match
        if self.similarity is not None:
            headers["X-Deja-Similarity"] = f"{self.similarity:.4f}"
        if self.degraded is not None:
            headers["X-Deja-Degraded"] = self.degraded
        if self.entry_id is not None:
            headers["X-Deja-Entry"] = self.entry_id
        if self.ttl_s is not None:
            headers["X-Deja-TTL"] = str(round(self.ttl_s))
        if self.age_s is not None:
            headers["Age"] = str(int(self.age_s))
        if self.coalesced:
            headers["X-Deja-Coalesced"] = "1"
        if self.inputs_cached is not None:
            cached, total = self.inputs_cached
            headers["X-Deja-Inputs-Cached"] = f"{cached}/{total}"
        if self.explanation is not None:
            explained = explanation_header(self.explanation)
            if explained:
                headers["X-Deja-Explain"] = explained
        return headers


# The header names the checks as the product describes them (negation, numbers, entities, roles,
# antonyms, question, answers); the `guard_rejections` statistic keeps its singular labels.
_HEADER_NAMES = {
    GuardName.NUMBER: "numbers",
    GuardName.ENTITY: "entities",
    GuardName.ROLE: "roles",
    GuardName.ANTONYM: "antonyms",
}


def explanation_header(explanation: LookupExplanation) -> str:
    """`similarity=0.8731; threshold=0.9000; refused=roles`: the keys that are known, in that
    order (`served=` on hits), numbers to 4 places."""
    parts = []
    if explanation.similarity is not None:
        parts.append(f"similarity={explanation.similarity:.4f}")
    if explanation.threshold is not None:
        parts.append(f"threshold={explanation.threshold:.4f}")
    if explanation.refused is not None:
        refused = explanation.refused
        name = _HEADER_NAMES.get(refused, refused) if isinstance(refused, GuardName) else refused
        parts.append(f"refused={name}")
    if explanation.served is not None:
        parts.append(f"served={explanation.served}")
    return "; ".join(parts)


CONTEXT = web.RequestKey("deja_context", RequestContext)
