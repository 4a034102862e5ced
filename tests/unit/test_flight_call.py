"""One upstream call of a flight, with the upstream faked at the client's transport seam: what
the flight's waiters are given, what is stored, and how failures and retries look to them.

The call runs as the registry runs it (a task whose DejaErrors become a FlightFailed), behind a
real gate (admission, an always-closed breaker, the client and its retries), in front of a real
LRU-K tier behind a real CacheService. The tier's and the entry builder's clock is a
ManualClock, and so is the clock the client reads HTTP dates against.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
from dataclasses import dataclass, field, replace
from typing import Any

from core.clock import ManualClock
from core.config import CacheConfig, DegradeConfig, LruKConfig, TtlConfig, UpstreamConfig
from core.errors import UpstreamProtocolError
from core.pacing import LoopTurns
from core.recorder import CacheRecorder, NotStoredReason, OtherFinishReason
from core.semantic_config import SemanticConfig, VerifyConfig
from fallback.breaker import AlwaysClosedBreaker
from normalize.keys.request import CacheRequest, Route
from normalize.prompt_features import NoFeatures
from proxy.answering.admission import AdmissionControl
from proxy.answering.answer_store import Answer, AnswerStore
from proxy.answering.entry_builder import EntryBuilder
from proxy.answering.flight_call import CallPlan, UpstreamCaller
from proxy.answering.flights import (
    Flight,
    FlightBody,
    FlightChunk,
    FlightEnd,
    FlightEvent,
    FlightFailed,
    FlightHead,
    FlightRegistry,
)
from proxy.answering.gate import UpstreamGate
from proxy.answering.store_rule import StoreRule
from proxy.upstream.client import UpstreamClient, UpstreamRequest
from tests.support.entries import TAG
from tests.support.fake_upstream import (
    EVENT_STREAM,
    FakeTransport,
    Scripted,
    chat_chunks,
    chat_completion,
    error_reply,
    json_reply,
    sse_reply,
)
from tiers.base import NearMiss
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import ThresholdController
from tiers.policies.ttl import TtlPolicy
from tiers.service import CacheService

ENTRY_ID = f"{TAG}-miss"
ANSWER = "Paris is the capital of France."
# The wall clock stands 0.95 s into a second, so an HTTP date one second on asks for 0.05 s:
# only a client reading the injected clock waits that (the real one would find it long past).
WALL_START_S = 1_700_000_000.95
RETRY_AT_S = 1_700_000_001


def cache_request(stream: bool) -> CacheRequest:
    return CacheRequest(
        route=Route.CHAT,
        tenant="t",
        namespace="",
        model="m",
        partition=TAG + "p" * 48,
        exact_key=TAG + "capital",
        prompt_text=None,
        stream=stream,
        include_usage=False,
    )


def plan(stream: bool, store: bool = True) -> CallPlan:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Capital?"}]}
    if stream:
        body["stream"] = True
    upstream = UpstreamRequest(
        "POST",
        "chat/completions",
        (("Content-Type", "application/json"),),
        json.dumps(body).encode(),
    )
    return CallPlan(cache_request(stream), upstream, NoFeatures(), store, None, False)


class RecordedAnswers(AnswerStore):
    """The real answer store, remembering each answer it was handed."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.handed: list[Answer] = []

    async def store(self, answer: Answer) -> NotStoredReason | OtherFinishReason | None:
        self.handed.append(answer)
        return await super().store(answer)


@dataclass
class Call:
    """A flight's call against a scripted upstream, and where its answer may be stored."""

    transport: FakeTransport
    clock: ManualClock = field(default_factory=lambda: ManualClock(wall_start_s=WALL_START_S))
    recorder: CacheRecorder = field(default_factory=CacheRecorder)

    def __post_init__(self) -> None:
        self.service = CacheService([LruKTier(LruKConfig(), self.clock)], self.clock, self.recorder)
        # No backoff between retries of a 5xx: the test is about whether, not how long.
        config = UpstreamConfig(url="http://upstream.test/v1", retry_backoff_s=0.0)
        self.client = UpstreamClient(config, self.transport, random.Random(0), self.clock)
        gate = UpstreamGate(self.client, AlwaysClosedBreaker(), AdmissionControl(4, 4, 1.0))
        ttl = TtlPolicy(TtlConfig(), random.Random(0))
        thresholds = ThresholdController(VerifyConfig(), 0.86)
        entries = EntryBuilder(
            CacheConfig(), DegradeConfig(), SemanticConfig(), ttl, thresholds, self.clock
        )
        self.answers = RecordedAnswers(self.service, entries, StoreRule(), LoopTurns())
        self.caller = UpstreamCaller(gate, self.answers, self.recorder, LoopTurns())

    async def run(self, plan: CallPlan) -> list[FlightEvent]:
        """Runs the call to its end as the registry runs it; the events the waiters saw."""
        await self.client.start()
        flight = Flight(plan.request.exact_key, ENTRY_ID, plan.request.stream, plan.store, False)
        FlightRegistry().start(flight, lambda f: self.caller.run(f, plan))
        assert flight.task is not None
        await flight.task
        await self.client.close()
        assert self.transport.unreleased() == 0, "every upstream response is released"
        return flight.events

    async def stored_answer(self) -> str | None:
        entry = await self.service.get_entry(ENTRY_ID)
        if entry is None:
            return None
        message = json.loads(entry.body)["choices"][0]["message"]
        return str(message["content"])


def scripted(*replies: Scripted) -> Call:
    return Call(FakeTransport.scripted(*replies))


async def test_a_streamed_miss_is_relayed_as_it_comes_and_stored() -> None:
    chunks = chat_chunks(ANSWER)
    call = scripted(sse_reply(chunks, slice_bytes=[7, 1, 30]))  # events cut anywhere
    events = await call.run(plan(stream=True))
    assert events[0] == FlightHead(200, EVENT_STREAM)
    relayed = [e for e in events[1:-1] if isinstance(e, FlightChunk)]
    assert [c.obj for c in relayed] == chunks and len(relayed) == len(events) - 2
    end = events[-1]
    assert isinstance(end, FlightEnd) and end.completion is not None
    assert end.completion["choices"][0]["message"]["content"] == ANSWER
    assert await call.stored_answer() == ANSWER
    assert call.recorder.snapshot().not_stored == {}


async def test_a_whole_miss_is_relayed_as_one_body_and_stored() -> None:
    call = scripted(json_reply(chat_completion(ANSWER), slice_bytes=5))
    events = await call.run(plan(stream=False))
    assert [type(e) for e in events] == [FlightHead, FlightBody]
    body = events[1]
    assert isinstance(body, FlightBody) and json.loads(body.raw) == chat_completion(ANSWER)
    assert await call.stored_answer() == ANSWER


async def test_a_misses_near_miss_goes_with_its_answer_to_the_store() -> None:
    # The entry it names learns from the answer there (tests/unit/test_miss_learning.py).
    call = scripted(json_reply(chat_completion(ANSWER)))
    near = NearMiss(TAG + "-neighbour", 0.87)
    await call.run(replace(plan(stream=False), near_miss=near))
    [handed] = call.answers.handed
    assert handed.near_miss == near and await call.stored_answer() == ANSWER


async def test_a_stream_that_breaks_off_fails_its_waiters_and_is_not_stored() -> None:
    call = scripted(sse_reply(chat_chunks(ANSWER), broken_after=3))
    events = await call.run(plan(stream=True))
    assert [type(e) for e in events] == [FlightHead, *[FlightChunk] * 3, FlightFailed]
    failed = events[-1]
    assert isinstance(failed, FlightFailed) and isinstance(failed.error, UpstreamProtocolError)
    assert await call.stored_answer() is None


async def test_a_stream_without_its_terminal_event_is_relayed_but_not_stored() -> None:
    call = scripted(sse_reply(chat_chunks(ANSWER), done=False))
    events = await call.run(plan(stream=True))
    assert events[-1] == FlightEnd(None)
    assert await call.stored_answer() is None
    assert call.recorder.snapshot().not_stored == {"incomplete": 1}


async def test_a_5xx_is_retried_and_the_waiters_see_only_the_answer() -> None:
    call = scripted(error_reply(503), error_reply(502), json_reply(chat_completion(ANSWER)))
    events = await call.run(plan(stream=False))
    assert len(call.transport.sent) == 3
    assert events[0] == FlightHead(200, (("Content-Type", "application/json"),))
    assert await call.stored_answer() == ANSWER


async def test_a_5xx_on_every_attempt_is_relayed_and_not_stored() -> None:
    call = scripted(*[error_reply(500)] * 3)
    events = await call.run(plan(stream=True))
    assert len(call.transport.sent) == 3
    head, body = events
    assert isinstance(head, FlightHead) and head.status == 500
    assert isinstance(body, FlightBody) and body.obj is not None and "error" in body.obj
    assert await call.stored_answer() is None
    assert call.recorder.snapshot().not_stored == {"error": 1}


async def test_a_429_waits_its_retry_after_read_against_the_injected_clock() -> None:
    retry_at = email.utils.formatdate(RETRY_AT_S, usegmt=True)
    call = scripted(
        error_reply(429, headers={"Retry-After": retry_at}),
        json_reply(chat_completion(ANSWER)),
    )
    loop = asyncio.get_running_loop()
    began_s = loop.time()
    events = await call.run(plan(stream=False))
    assert loop.time() - began_s >= 0.04  # ~0.05 s asked; the real clock would ask none
    assert len(call.transport.sent) == 2
    assert isinstance(events[0], FlightHead) and events[0].status == 200
    assert await call.stored_answer() == ANSWER


async def test_nothing_is_stored_when_the_request_forbids_it() -> None:
    call = scripted(json_reply(chat_completion(ANSWER)))
    events = await call.run(replace(plan(stream=False), store=False))
    assert isinstance(events[-1], FlightBody)
    assert await call.stored_answer() is None
    assert call.recorder.snapshot().not_stored == {"no_store": 1}
