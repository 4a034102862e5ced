"""A completion → the Entry that stores it (for upstream answers and for warm-up lines alike).

The stored body is the completion without its per-response `id` and `created` (and without logprobs
Deja asked for on its own account). The TTL comes from the answer's certainty
(tiers/policies/ttl.py), capped by `X-Deja-Store-TTL`; the prompt's lemma analysis and embedding
come from its features, so the entry can be found by lemma key and by meaning.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.clock import Clock
from core.config import CacheConfig, DegradeConfig
from core.semantic_config import SemanticConfig
from normalize.keys.request import CacheRequest, Route
from normalize.prompt_features import PromptFeatures
from proxy.answering.answer_agreement import AnswerEmbedder, answer_vector
from proxy.protocol.response_object import token_logprobs, usage_tokens
from tiers.base import Entry
from tiers.policies.thresholds import ThresholdController
from tiers.policies.ttl import (
    AnswerCertainty,
    TtlPolicy,
    certainty_from_chat_logprobs,
    certainty_from_text_logprobs,
)


class EntryBuilder:
    def __init__(
        self,
        cache: CacheConfig,
        degrade: DegradeConfig,
        semantic: SemanticConfig,
        ttl: TtlPolicy,
        thresholds: ThresholdController,
        clock: Clock,
        answer_embedder: AnswerEmbedder | None = None,
        store_prompts: bool = False,
    ):
        self._cache = cache
        self._degrade = degrade
        self._semantic = semantic
        self._ttl = ttl
        self._thresholds = thresholds
        self._clock = clock
        self._answer_embedder = answer_embedder
        # admin.store_prompts: entries keep their prompt's text, for the dashboard.
        self._store_prompts = store_prompts

    async def build(
        self,
        entry_id: str,
        request: CacheRequest,
        completion: dict[str, Any],
        features: PromptFeatures,
        ttl_cap_s: float | None,
        strip_logprobs: bool,
    ) -> Entry | None:
        """The entry, or None when the answer is larger than `cache.max_entry_bytes`."""
        certainty = self.certainty(request.route, completion)
        # A Responses API answer keeps its id: a hit for a request whose upstream keeps its
        # responses serves it (proxy/protocol/response_object.py).
        per_response = () if request.route is Route.RESPONSES else ("id", "created")
        stored = {k: v for k, v in completion.items() if k not in per_response}
        if strip_logprobs:
            stored["choices"] = [without_logprobs(c) for c in stored.get("choices", [])]
        body = orjson.dumps(stored)
        if len(body) > self._cache.max_entry_bytes:
            return None
        prompt_tokens, completion_tokens = usage_of(request.route, completion)
        analysis = await features.analysis() if features.semantic_allowed() else None
        vector = await features.vector() if analysis is not None else None
        return Entry(
            entry_id=entry_id,
            route=request.route,
            tenant=request.tenant,
            namespace=request.namespace,
            model=request.model,
            partition=request.partition,
            exact_key=request.exact_key,
            lemma_key=analysis.lemma_key if analysis else None,
            body=body,
            stored_at=self._clock.time(),
            ttl_s=self._ttl.ttl_s(certainty.confidence, certainty.certainty, (), ttl_cap_s),
            grace_s=self._degrade.stale_grace_s,
            confidence=certainty.confidence,
            certainty=certainty.certainty,
            threshold=self._thresholds.neutral_floor,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            prompt=request.prompt_text if self._store_prompts else None,
            analysis=analysis.wire if analysis else None,
            parsed_analysis=analysis.analysis if analysis else None,
            vector=vector.astype("float32").tobytes() if vector is not None else None,
        )

    def embedding(
        self,
        entry_id: str,
        request: CacheRequest,
        vector: bytes,
        prompt_tokens: int,
        ttl_cap_s: float | None,
    ) -> Entry | None:
        """The entry of one input's embedding (`vector`, float32 bytes, is its body), or None
        when it is larger than `cache.max_entry_bytes`. A model gives the same input the same
        vector: its TTL is the one a certain answer gets, capped by `X-Deja-Store-TTL`."""
        if len(vector) > self._cache.max_entry_bytes:
            return None
        certain = AnswerCertainty()
        return Entry(
            entry_id=entry_id,
            route=request.route,
            tenant=request.tenant,
            namespace=request.namespace,
            model=request.model,
            partition=request.partition,
            exact_key=request.exact_key,
            lemma_key=None,
            body=vector,
            stored_at=self._clock.time(),
            ttl_s=self._ttl.ttl_s(certain.confidence, certain.certainty, (), ttl_cap_s),
            grace_s=self._degrade.stale_grace_s,
            confidence=certain.confidence,
            certainty=certain.certainty,
            threshold=self._thresholds.neutral_floor,
            prompt_tokens=prompt_tokens,
        )

    async def answer_vector(self, entry: Entry, completion: dict[str, Any]) -> bytes | None:
        """The answer's embedding for a semantic entry (the tier compares neighbours' answers
        with it), or None: not a semantic entry, the check turned off, nothing to embed."""
        if (
            entry.vector is None
            or self._answer_embedder is None
            or self._semantic.answer_margin <= 0
        ):
            return None
        return await answer_vector(completion, self._answer_embedder, entry.language)

    def certainty(self, route: Route, completion: dict[str, Any]) -> AnswerCertainty:
        """Confidence and certainty over every choice's tokens (token-weighted)."""
        if route is Route.RESPONSES:
            # The output text's logprobs, when the request included them, read as chat's.
            tokens = token_logprobs(completion)
            if not tokens:
                return AnswerCertainty()
            return certainty_from_chat_logprobs({"content": tokens})
        figures = [
            certainty_from_chat_logprobs(c.get("logprobs"))
            if route is Route.CHAT
            else certainty_from_text_logprobs(c.get("logprobs"))
            for c in completion.get("choices", [])
            if isinstance(c, dict)
        ]
        measured = [f for f in figures if f.tokens]
        if not measured:
            return AnswerCertainty()
        total = sum(f.tokens for f in measured)
        return AnswerCertainty(
            confidence=sum(f.confidence * f.tokens for f in measured) / total,
            certainty=sum(f.certainty * f.tokens for f in measured) / total,
            tokens=total,
        )


def asked_logprobs(route: Route, body: dict[str, Any]) -> bool:
    """Whether a request body asks for logprobs itself (chat: true; legacy: a number). Deja
    never adds logprobs to a Responses API request, so whatever its answer holds was asked for
    (`include`)."""
    if route is Route.RESPONSES:
        return True
    value = body.get("logprobs")
    return bool(value) if route is Route.CHAT else value is not None


def without_logprobs(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("logprobs") is not None:
        return {**choice, "logprobs": None}
    return choice


def usage_of(route: Route, completion: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of an answer's usage; 0 where absent."""
    if route is Route.RESPONSES:
        return usage_tokens(completion)
    return _usage(completion, "prompt_tokens"), _usage(completion, "completion_tokens")


def _usage(completion: dict[str, Any], field: str) -> int:
    usage = completion.get("usage")
    value = usage.get(field) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
