"""Storing a finished answer: one path for a miss's answer, a warm-up line and a verification's
fresh answer; an embedding's input takes the same path from its entry on
(`store_embedding`: exact key only, so nothing to analyse or embed).

    store rule ─▶ build the entry (prompt analysis and embedding) ─▶ CacheService.store:
        in-process tier and semantic index at once ─▶ answer embedding ─▶ shared tiers (Redis)
        and one replication event, the entry written once, with it ─▶ a near-miss's
        neighbour learns from the answer embedding (proxy/answering/miss_learning.py)

The answer's embedding (what the semantic tier compares neighbours' answers with) is computed
inside the store, so the shared tiers are written once, with it, and other replicas hear of the
entry once; what this process holds is written before it, so a client that repeats its question,
or a paraphrase of it, right after the answer finds it here.

Nothing here counts: each caller knows whether a refusal is a statistic (a live miss's answer,
`CacheRecorder.not_stored`), an error for its client (a warm-up line), or neither (a verification).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.pacing import Pacer
from core.recorder import NotStoredReason, OtherFinishReason
from core.tracing import NoopTracer, StageTracer
from normalize.keys.request import CacheRequest
from normalize.prompt_features import PromptFeatures
from proxy.answering.entry_builder import EntryBuilder
from proxy.answering.miss_learning import MissLearner
from proxy.answering.store_rule import StoreRule
from tiers.base import NearMiss
from tiers.service import CacheService


@dataclass(frozen=True, slots=True)
class Answer:
    """A finished answer and the request it answers."""

    entry_id: str
    request: CacheRequest
    features: PromptFeatures
    completion: dict[str, Any]
    # `X-Deja-Store-TTL`: the entry's TTL is at most this.
    ttl_cap_s: float | None = None
    # Logprobs the request did not ask for (Deja added them, or a warm-up line carries them):
    # they set the TTL, and are not kept.
    strip_logprobs: bool = False
    # A miss's nearest guard-passing neighbour just under its threshold: it learns from this
    # answer (proxy/answering/miss_learning.py). None for anything but such a miss.
    near_miss: NearMiss | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingAnswer:
    """One input's embedding from the upstream (float32 bytes) and the request it answers."""

    entry_id: str
    request: CacheRequest
    vector: bytes
    # The input's share of the upstream call's prompt tokens (for the tokens-saved figures).
    prompt_tokens: int = 0
    ttl_cap_s: float | None = None


class AnswerStore:
    def __init__(
        self,
        service: CacheService,
        entries: EntryBuilder,
        rule: StoreRule,
        turns: Pacer,
        tracer: StageTracer | None = None,
        learner: MissLearner | None = None,
    ) -> None:
        self._service = service
        self._entries = entries
        self._rule = rule
        self._turns = turns
        self._tracer = tracer or NoopTracer()
        self._learner = learner

    async def store(self, answer: Answer) -> NotStoredReason | OtherFinishReason | None:
        """Store `answer` when the store rule allows it and it fits: None when stored, else why
        not, as the recorder counts it (the rule's refusal, or `too_large`)."""
        refusal = self._rule.refusal(answer.completion, answer.request.route)
        if refusal is not None:
            return refusal
        # Storing is background work, spread out: one step per loop iteration of the store's
        # lane (core/pacing.py), before building the entry and again before writing it.
        with self._tracer.span("deja.store", {"deja.entry": answer.entry_id}):
            await self._turns.step()
            entry = await self._entries.build(
                answer.entry_id,
                answer.request,
                answer.completion,
                answer.features,
                answer.ttl_cap_s,
                answer.strip_logprobs,
            )
            if entry is None:
                return NotStoredReason.TOO_LARGE
            await self._turns.step()
            fresh_vector: bytes | None = None

            async def answer_vector() -> bytes | None:
                # Kept for the near-miss's neighbour, which learns from it after the store.
                nonlocal fresh_vector
                fresh_vector = await self._entries.answer_vector(entry, answer.completion)
                return fresh_vector

            await self._service.store(entry, answer_vector=answer_vector)
            if answer.near_miss is not None and self._learner is not None:
                await self._learner.learn(answer.near_miss, fresh_vector)
        return None

    async def store_embedding(self, answer: EmbeddingAnswer) -> NotStoredReason | None:
        """Store one input's embedding (exact key only: no analysis, no semantic index, no
        answer check); None when stored, `too_large` when it does not fit. Not paced: its
        client's answer waits for it (proxy/http/embeddings.py)."""
        with self._tracer.span("deja.store", {"deja.entry": answer.entry_id}):
            entry = self._entries.embedding(
                answer.entry_id,
                answer.request,
                answer.vector,
                answer.prompt_tokens,
                answer.ttl_cap_s,
            )
            if entry is None:
                return NotStoredReason.TOO_LARGE
            await self._service.store(entry)
        return None
