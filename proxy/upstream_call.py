"""One upstream call of a flight: admission, breaker, the call, its events, and the store.

The call publishes what it receives as it receives it (nothing is buffered before clients see
it), folds a streamed answer into a completion, and stores the answer only when it is clean:
a 2xx, a terminal event, every choice finished with stop or tool_calls, no error, not too
large, and the request allowed storing. Storing happens after the waiters have their answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import orjson

from core.clock import Clock
from core.config import DejaConfig
from normalize.features import PromptFeatures
from normalize.request import CacheRequest, Route
from proxy.flight import Flight, FlightBody, FlightChunk, FlightEnd, FlightHead
from proxy.sse import CLEAN_FINISH, DONE, CompletionAssembler, SseParser, dumps
from proxy.upstream import UpstreamRequest, UpstreamResponse
from proxy.upstream_gate import UpstreamGate
from tiers.base import Entry
from tiers.service import CacheService
from tiers.stats import CacheStats
from tiers.thresholds import ThresholdController
from tiers.ttl import (
    AnswerCertainty,
    TtlPolicy,
    certainty_from_chat_logprobs,
    certainty_from_text_logprobs,
)

_log = logging.getLogger("deja.upstream")


@dataclass(frozen=True, slots=True)
class CallPlan:
    request: CacheRequest
    upstream: UpstreamRequest
    features: PromptFeatures
    store: bool
    store_ttl_cap_s: float | None
    # Deja asked for logprobs the client did not: they are stripped before anyone sees them.
    added_logprobs: bool
    # The client's request as it was, sent instead when an upstream rejects Deja's additions
    # (logprobs) with a 4xx; None when nothing was added.
    plain_upstream: UpstreamRequest | None = None


class UpstreamCaller:
    def __init__(
        self,
        gate: UpstreamGate,
        service: CacheService,
        ttl: TtlPolicy,
        thresholds: ThresholdController,
        clock: Clock,
        config: DejaConfig,
        stats: CacheStats,
    ) -> None:
        self._gate = gate
        self._service = service
        self._ttl = ttl
        self._thresholds = thresholds
        self._clock = clock
        self._config = config
        self._stats = stats

    async def run(self, flight: Flight, plan: CallPlan) -> None:
        """The body of a flight's task (see FlightRegistry.start)."""
        async with self._gate.admitted():
            response = await self._gate.open(plan.upstream)
            if plan.plain_upstream is not None and response.status in (400, 422):
                # Some upstreams refuse logprobs (or refuse them with tools): ask as the
                # client asked, and give up on certainty figures for this answer.
                response.release()
                plan = replace(
                    plan, upstream=plan.plain_upstream, added_logprobs=False, plain_upstream=None
                )
                flight.added_logprobs = False
                response = await self._gate.open(plan.upstream)
            try:
                completion = await self._relay(flight, plan, response)
            finally:
                response.release()
        if completion is not None:
            await self._store(flight.entry_id, plan, completion)

    async def _relay(
        self, flight: Flight, plan: CallPlan, response: UpstreamResponse
    ) -> dict[str, Any] | None:
        """Publishes the response; returns the completion when it is worth storing."""
        headers = tuple(response.forwardable_headers().items())
        flight.publish(FlightHead(response.status, headers))
        ok = 200 <= response.status < 300
        if not ok or not flight.stream:
            raw = await response.read()
            obj = _json_object(raw)
            flight.publish(FlightBody(raw, obj))
            if not ok or obj is None:
                self._stats.not_stored["error" if not ok else "bad_body"] += 1
                return None
            return obj if self._storable(plan, obj, _finish_reasons(obj)) else None
        assembler = CompletionAssembler(plan.request.route)
        parser = SseParser()
        async for chunk in response.iter_chunks():
            self._publish_payloads(flight, assembler, parser.feed(chunk))
        self._publish_payloads(flight, assembler, parser.flush())
        completion = assembler.completion() if assembler.saw_done else None
        flight.publish(FlightEnd(completion))
        if completion is None or assembler.error is not None:
            self._stats.not_stored["incomplete"] += 1
            return None
        return completion if self._storable(plan, completion, assembler.finish_reasons) else None

    @staticmethod
    def _publish_payloads(
        flight: Flight, assembler: CompletionAssembler, payloads: list[str]
    ) -> None:
        for payload in payloads:
            if payload.strip() == DONE:
                assembler.saw_done = True
                continue
            obj = _json_object(payload.encode())
            if obj is not None:
                assembler.feed(obj)
            flight.publish(FlightChunk(payload, obj))

    def _storable(self, plan: CallPlan, completion: dict[str, Any], reasons: list[Any]) -> bool:
        if not plan.store:
            self._stats.not_stored["no_store"] += 1
            return False
        if not reasons or not all(r in CLEAN_FINISH for r in reasons):
            bad = next((str(r) for r in reasons if r not in CLEAN_FINISH), "no_choices")
            self._stats.not_stored[bad] += 1
            return False
        return True

    async def _store(self, entry_id: str, plan: CallPlan, completion: dict[str, Any]) -> None:
        certainty = self._certainty(plan.request.route, completion)
        stored = {k: v for k, v in completion.items() if k not in ("id", "created")}
        if plan.added_logprobs:
            stored["choices"] = [strip_logprobs(c) for c in stored.get("choices", [])]
        body = dumps(stored).encode()
        if len(body) > self._config.cache.max_entry_bytes:
            self._stats.not_stored["too_large"] += 1
            return
        analysis = await plan.features.analysis() if plan.features.semantic_allowed() else None
        vector = await plan.features.vector() if analysis is not None else None
        request = plan.request
        entry = Entry(
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
            ttl_s=self._ttl.ttl_s(
                certainty.confidence, certainty.certainty, (), plan.store_ttl_cap_s
            ),
            grace_s=self._config.degrade.stale_grace_s,
            confidence=certainty.confidence,
            certainty=certainty.certainty,
            threshold=self._thresholds.neutral_floor,
            prompt_tokens=_usage(completion, "prompt_tokens"),
            completion_tokens=_usage(completion, "completion_tokens"),
            analysis=analysis.wire if analysis else None,
            vector=vector.astype("float32").tobytes() if vector is not None else None,
        )
        await self._service.store(entry)

    def _certainty(self, route: Route, completion: dict[str, Any]) -> AnswerCertainty:
        k = self._config.upstream.top_logprobs
        figures = [
            certainty_from_chat_logprobs(c.get("logprobs"), k)
            if route is Route.CHAT
            else certainty_from_text_logprobs(c.get("logprobs"), k)
            for c in completion.get("choices", [])
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


def _usage(completion: dict[str, Any], field: str) -> int:
    usage = completion.get("usage")
    value = usage.get(field) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def strip_logprobs(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("logprobs") is not None:
        return {**choice, "logprobs": None}
    return choice


def _finish_reasons(completion: dict[str, Any]) -> list[Any]:
    choices = completion.get("choices")
    return (
        [c.get("finish_reason") for c in choices if isinstance(c, dict)]
        if isinstance(choices, list)
        else []
    )


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None
