"""One upstream call of a flight: admission, breaker, the call, its events, and the store.

The call publishes what it receives as it receives it (nothing is buffered before clients see
it), folds a streamed answer into a completion, and stores the answer only when it is clean:
a 2xx, a terminal event (`[DONE]`; a Responses API stream's own terminal event), no error,
every event JSON, the answer finished as the `StoreRule` allows (stop, tool_calls, and length
unless `cache.store_truncated` is off; a response `completed`), not too large, and the request
allowed storing. Storing (proxy/answering/answer_store.py) happens after the
waiters have their answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import orjson

from core.pacing import Pacer
from core.recorder import CacheRecorder, NotStoredReason
from core.tracing import NoopTracer, StageTracer
from normalize.keys.request import CacheRequest
from normalize.prompt_features import PromptFeatures
from proxy.answering.answer_store import Answer, AnswerStore
from proxy.answering.flights import Flight, FlightBody, FlightChunk, FlightEnd, FlightHead
from proxy.answering.gate import UpstreamGate
from proxy.protocol.responses_stream import assembler_for
from proxy.protocol.sse import DONE, SseParser, StreamAssembler
from proxy.upstream.client import UpstreamRequest, UpstreamResponse
from tiers.base import NearMiss

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
    # The miss's near-miss (tiers.base.NearMiss): its entry learns from the stored answer.
    near_miss: NearMiss | None = None


class UpstreamCaller:
    def __init__(
        self,
        gate: UpstreamGate,
        answers: AnswerStore,
        recorder: CacheRecorder,
        upstream_turns: Pacer,
        tracer: StageTracer | None = None,
    ) -> None:
        self._gate = gate
        self._answers = answers
        self._tracer = tracer or NoopTracer()
        self._upstream_turns = upstream_turns
        self._recorder = recorder

    async def run(self, flight: Flight, plan: CallPlan) -> None:
        """The body of a flight's task (see FlightRegistry.start)."""
        with self._tracer.span("deja.upstream", {"deja.stream": flight.stream}) as span:
            async with self._gate.admitted() as slot:
                # Building and sending the upstream request is a step of the miss's own: it
                # waits for a turn, so that the hits that are ready go first
                # (core/pacing.py).
                await self._upstream_turns.step()
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
        if completion is None:
            return
        refusal = await self._answers.store(
            Answer(
                flight.entry_id,
                plan.request,
                plan.features,
                completion,
                plan.store_ttl_cap_s,
                plan.added_logprobs,
                plan.near_miss,
            )
        )
        if refusal is not None:
            self._recorder.not_stored(refusal)

    async def _relay(
        self, flight: Flight, plan: CallPlan, response: UpstreamResponse
    ) -> dict[str, Any] | None:
        """Publishes the response; returns the completion when it arrived whole and the request
        allows storing it (whether the store rule does is the answer store's to say)."""
        headers = tuple(response.forwardable_headers().items())
        flight.publish(FlightHead(response.status, headers))
        ok = 200 <= response.status < 300
        if not ok or not flight.stream:
            raw = await response.read()
            await self._upstream_turns.step()  # parsing a long answer is a step of its own
            obj = _json_object(raw)
            flight.publish(FlightBody(raw, obj))
            if not ok or obj is None:
                self._recorder.not_stored(
                    NotStoredReason.ERROR if not ok else NotStoredReason.BAD_BODY
                )
                return None
            return obj if self._may_store(plan) else None
        assembler = assembler_for(plan.request.route)
        parser = SseParser()
        garbled = False
        async for chunk in response.iter_chunks():
            garbled |= self._publish_payloads(flight, assembler, parser.feed(chunk))
        garbled |= self._publish_payloads(flight, assembler, parser.flush())
        completion = assembler.completion() if assembler.ended else None
        flight.publish(FlightEnd(completion))
        if completion is None or assembler.error is not None or garbled:
            self._recorder.not_stored(NotStoredReason.INCOMPLETE)
            return None
        return completion if self._may_store(plan) else None

    @staticmethod
    def _publish_payloads(flight: Flight, assembler: StreamAssembler, payloads: list[str]) -> bool:
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

    def _may_store(self, plan: CallPlan) -> bool:
        if not plan.store:
            self._recorder.not_stored(NotStoredReason.NO_STORE)
        return plan.store


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None
