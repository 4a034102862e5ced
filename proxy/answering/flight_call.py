"""One upstream call of a flight: admission, breaker, the call, its events, and the store.

The call publishes what it receives as it receives it (nothing is buffered before clients see
it), folds a streamed answer into a completion, and stores the answer only when it is clean:
a 2xx, a terminal event, no error, every event JSON, the choices ended as the `StoreRule`
allows (stop, tool_calls, and length unless `cache.store_truncated` is off), not too large,
and the request allowed storing. Storing happens after the waiters have their answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import orjson

from core.tracing import NoopTracer, StageTracer
from normalize.keys.request import CacheRequest
from normalize.prompt_features import PromptFeatures
from proxy.answering.entry_builder import EntryBuilder
from proxy.answering.flights import Flight, FlightBody, FlightChunk, FlightEnd, FlightHead
from proxy.answering.gate import UpstreamGate
from proxy.answering.store_rule import StoreRule
from proxy.protocol.sse import DONE, CompletionAssembler, SseParser
from proxy.upstream.client import UpstreamRequest, UpstreamResponse
from tiers.service import CacheService
from tiers.stats import CacheStats

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
        entries: EntryBuilder,
        stats: CacheStats,
        store_rule: StoreRule,
        tracer: StageTracer | None = None,
    ) -> None:
        self._gate = gate
        self._rule = store_rule
        self._tracer = tracer or NoopTracer()
        self._service = service
        self._entries = entries
        self._stats = stats

    async def run(self, flight: Flight, plan: CallPlan) -> None:
        """The body of a flight's task (see FlightRegistry.start)."""
        with self._tracer.span("deja.upstream", {"deja.stream": flight.stream}) as span:
            async with self._gate.admitted() as slot:
                response = await self._gate.open(plan.upstream, slot)
                if plan.plain_upstream is not None and response.status in (400, 422):
                    # Some upstreams refuse logprobs (or refuse them with tools): ask as the
                    # client asked, and give up on certainty figures for this answer.
                    response.release()
                    plan = replace(
                        plan,
                        upstream=plan.plain_upstream,
                        added_logprobs=False,
                        plain_upstream=None,
                    )
                    flight.added_logprobs = False
                    response = await self._gate.open(plan.upstream, slot)
                span.set_attribute("http.status_code", response.status)
                try:
                    completion = await self._relay(flight, plan, response)
                finally:
                    response.release()
        if completion is not None:
            await self._store(
                flight.entry_id,
                plan.request,
                plan.features,
                completion,
                plan.store_ttl_cap_s,
                plan.added_logprobs,
            )

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
            return obj if self._storable(plan, obj) else None
        assembler = CompletionAssembler(plan.request.route)
        parser = SseParser()
        garbled = False
        async for chunk in response.iter_chunks():
            garbled |= self._publish_payloads(flight, assembler, parser.feed(chunk))
        garbled |= self._publish_payloads(flight, assembler, parser.flush())
        completion = assembler.completion() if assembler.saw_done else None
        flight.publish(FlightEnd(completion))
        if completion is None or assembler.error is not None or garbled:
            self._stats.not_stored["incomplete"] += 1
            return None
        return completion if self._storable(plan, completion) else None

    @staticmethod
    def _publish_payloads(
        flight: Flight, assembler: CompletionAssembler, payloads: list[str]
    ) -> bool:
        """Publishes the payloads; True when one was not a JSON object. The clients get it as
        it came, but the assembled answer lacks it, so it must not be stored."""
        garbled = False
        for payload in payloads:
            if payload.strip() == DONE:
                assembler.saw_done = True
                continue
            obj = _json_object(payload.encode())
            if obj is not None:
                assembler.feed(obj)
            else:
                garbled = True
            flight.publish(FlightChunk(payload, obj))
        return garbled

    def _storable(self, plan: CallPlan, completion: dict[str, Any]) -> bool:
        if not plan.store:
            self._stats.not_stored["no_store"] += 1
            return False
        refusal = self._rule.refusal(completion)
        if refusal is not None:
            self._stats.not_stored[refusal] += 1
            return False
        return True

    async def store_answer(
        self, entry_id: str, request: CacheRequest, features: PromptFeatures, completion: Any
    ) -> bool:
        """Store an answer obtained outside a flight (a verification's fresh answer, a whole
        2xx JSON body) for `request`, when the store rule allows it; True if stored."""
        if self._rule.refusal(completion) is not None:  # not a completion: "no_choices"
            return False
        await self._store(entry_id, request, features, completion, None, False)
        return True

    async def _store(
        self,
        entry_id: str,
        request: CacheRequest,
        features: PromptFeatures,
        completion: dict[str, Any],
        ttl_cap_s: float | None,
        strip_logprobs: bool,
    ) -> None:
        # The waiters have their answer; storing is background work.
        with self._tracer.span("deja.store", {"deja.entry": entry_id}):
            entry = await self._entries.build(
                entry_id,
                request,
                completion,
                features,
                ttl_cap_s,
                strip_logprobs,
            )
            if entry is None:
                self._stats.not_stored["too_large"] += 1
                return
            await self._service.store(entry)
            answer = await self._entries.answer_vector(entry, completion)
            if answer is not None:
                await self._service.attach_answer_vector(entry.entry_id, answer)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None
