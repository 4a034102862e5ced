"""The gate in front of every upstream call, over a fake transport: one breaker outcome per call
whatever its retries, nothing sent while the breaker is open, and the admission slot given up
while a call waits to retry."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from core.config import UpstreamConfig
from core.errors import BreakerOpen, UpstreamUnreachable
from fallback.breaker import BreakerSnapshot
from proxy.answering.admission import AdmissionControl
from proxy.answering.gate import UpstreamGate
from proxy.upstream.client import UpstreamClient, UpstreamRequest
from tests.support.fake_upstream import (
    FakeTransport,
    Refused,
    Scripted,
    Silent,
    error_reply,
    json_reply,
)

REQUEST = UpstreamRequest("POST", "chat/completions", (), b"{}")
OK = json_reply({"ok": True})
CONFIG = UpstreamConfig(url="http://upstream.test/v1", retry_backoff_s=0.0)


class RecordingBreaker:
    """A breaker that is open or closed as the test says, and records every outcome."""

    def __init__(self, open_: bool = False) -> None:
        self.open = open_
        self.outcomes: list[str] = []

    def allow(self) -> bool:
        return not self.open

    def record_success(self, ttfb_s: float) -> None:
        self.outcomes.append("success")

    def record_failure(self) -> None:
        self.outcomes.append("failure")

    def release(self) -> None:
        self.outcomes.append("release")

    def retry_after_s(self) -> int:
        return 7

    def snapshot(self) -> BreakerSnapshot:
        raise AssertionError("the gate never asks for a snapshot")


async def until(condition: Callable[[], bool], max_iterations: int = 1000) -> None:
    """Let the loop run, one iteration at a time, until `condition` holds (bounded: nothing
    here sleeps, so the other tasks' steps are all that can make it hold)."""
    for _ in range(max_iterations):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def gate_over(
    *replies: Scripted, breaker: RecordingBreaker, admission: AdmissionControl | None = None
) -> tuple[UpstreamGate, FakeTransport]:
    transport = FakeTransport.scripted(*replies)
    client = UpstreamClient(CONFIG, transport, random.Random(0))
    await client.start()
    return UpstreamGate(client, breaker, admission or AdmissionControl(4, 4, 1.0)), transport


@pytest.mark.parametrize(
    ("replies", "outcome"),
    [
        ([error_reply(503), error_reply(502), OK], "success"),  # the call, not each attempt
        ([error_reply(500)] * 3, "failure"),
        ([error_reply(400)], "success"),  # the client's doing
        ([error_reply(429, code="insufficient_quota")], "success"),  # pacing, not failing
    ],
    ids=["retried-then-ok", "5xx-to-the-end", "4xx", "429"],
)
async def test_a_call_has_one_outcome_whatever_its_attempts(
    replies: list[Scripted], outcome: str
) -> None:
    breaker = RecordingBreaker()
    gate, transport = await gate_over(*replies, breaker=breaker)
    async with gate.call(REQUEST):
        pass
    assert breaker.outcomes == [outcome]
    assert transport.unreleased() == 0


async def test_an_unreachable_upstream_is_one_failure() -> None:
    breaker = RecordingBreaker()
    gate, transport = await gate_over(Refused(), Refused(), Refused(), breaker=breaker)
    with pytest.raises(UpstreamUnreachable):
        async with gate.call(REQUEST):
            pass
    assert breaker.outcomes == ["failure"] and len(transport.sent) == 3


async def test_an_abandoned_call_releases_the_breaker_without_an_outcome() -> None:
    breaker = RecordingBreaker()
    gate, transport = await gate_over(Silent(), breaker=breaker)

    async def call() -> None:
        async with gate.call(REQUEST):
            pass

    task = asyncio.get_running_loop().create_task(call())
    await until(lambda: bool(transport.sent))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert breaker.outcomes == ["release"]


async def test_an_open_breaker_sends_nothing_and_says_when_to_come_back() -> None:
    breaker = RecordingBreaker(open_=True)
    gate, transport = await gate_over(OK, breaker=breaker)
    with pytest.raises(BreakerOpen) as refused:
        async with gate.call(REQUEST):
            pass
    assert refused.value.retry_after_s == 7
    assert transport.sent == [] and breaker.outcomes == []


async def test_a_call_waiting_to_retry_leaves_its_slot_to_another() -> None:
    # One slot, no queue: the second call gets in only because the first gave its slot up
    # while it waited out the 429's 50 ms.
    admission = AdmissionControl(1, 0, 1.0)
    wait = error_reply(429, headers={"retry-after-ms": "50"})
    gate, transport = await gate_over(
        wait,
        json_reply({"who": "second"}),
        json_reply({"who": "first"}),
        breaker=RecordingBreaker(),
        admission=admission,
    )

    async def call() -> bytes:
        async with gate.call(REQUEST) as response:
            return await response.read()

    first = asyncio.get_running_loop().create_task(call())
    await until(lambda: bool(transport.sent) and admission.active == 0)
    assert await call() == b'{"who": "second"}'
    assert await first == b'{"who": "first"}'
    assert len(transport.sent) == 3
