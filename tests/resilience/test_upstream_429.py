"""An upstream's rate-limit 429: retried (within `upstream.max_retries`, before any byte reached
the client) after the wait it asks for, outside the admission slot; passed through at once, its
headers and body as they came, when the wait is past `upstream.retry_after_max_s` or the
account is out of quota; never a breaker failure."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time

import aiohttp
import pytest

from core.clock import ManualClock
from core.errors import RateLimited
from proxy.answering.admission import AdmissionControl
from proxy.composition.app import DEJA
from tests.conftest import ProxyFactory
from tests.resilience.client import ask, breaker_state
from tests.support.stub_upstream import Behaviour, StubUpstream

CHAT = "/v1/chat/completions"
QUOTA_BODY = {
    "error": {
        "message": "stub failure 429",
        "type": "insufficient_quota",
        "code": "insufficient_quota",
    }
}


def rate_limited(failures: int | None = 1, **headers: str) -> Behaviour:
    headers = {k.replace("_", "-"): v for k, v in headers.items()}
    return Behaviour(status=429, failures=failures, error_headers=headers)


def gap_s(stub: StubUpstream) -> float:
    """Between the first two requests the upstream received."""
    return stub.arrivals_s[1] - stub.arrivals_s[0]


@pytest.mark.parametrize("stream", [False, True])
async def test_retry_after_ms_is_waited_out_then_the_answer_served(
    proxy_factory: ProxyFactory, stub: StubUpstream, stream: bool
) -> None:
    stub.behaviour = rate_limited(retry_after_ms="300", retry_after="5")  # ms wins
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, proxy.url(""), "Who paces whom?", stream=stream)
    assert (reply.status, reply.cache, reply.complete) == (200, "miss", True)
    assert reply.text == "Answer to: Who paces whom?"
    assert stub.completion_calls() == 2
    assert 0.3 <= gap_s(stub) < 0.8


async def test_retry_after_seconds(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    stub.behaviour = rate_limited(retry_after="1")
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, proxy.url(""), "How long is a second?")
    assert (reply.status, stub.completion_calls()) == (200, 2)
    assert 1.0 <= gap_s(stub) < 1.5


async def test_retry_after_an_http_date(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    clock = ManualClock(wall_start_s=1_700_000_000.0)  # whole seconds, as HTTP dates are
    stub.behaviour = rate_limited(retry_after=email.utils.formatdate(clock.time() + 1, usegmt=True))
    proxy = await proxy_factory(clock=clock)
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, proxy.url(""), "What time is it?")
    assert (reply.status, stub.completion_calls()) == (200, 2)
    assert 1.0 <= gap_s(stub) < 1.5


async def test_without_a_retry_after_the_backoff_applies(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = rate_limited()
    proxy = await proxy_factory(upstream={"retry_backoff_s": 0.1})
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, proxy.url(""), "And how long now?")
    assert (reply.status, stub.completion_calls()) == (200, 2)
    assert 0.05 <= gap_s(stub) < 0.5


async def test_a_wait_past_the_cap_is_passed_through_at_once_with_its_headers(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = rate_limited(failures=None, retry_after="5", x_ratelimit_remaining="0")
    proxy = await proxy_factory(upstream={"retry_after_max_s": 2})
    started = time.monotonic()
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, proxy.url(""), "Can I wait five seconds?")
    assert time.monotonic() - started < 0.5
    assert (reply.status, reply.cache, stub.completion_calls()) == (429, "miss", 1)
    assert (reply.headers["Retry-After"], reply.headers["X-Ratelimit-Remaining"]) == ("5", "0")
    assert reply.error == {"message": "stub failure 429", "type": "rate_limit_error", "code": None}


async def test_a_cap_of_zero_never_retries(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    stub.behaviour = rate_limited(retry_after_ms="10")
    proxy = await proxy_factory(upstream={"retry_after_max_s": 0})
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, proxy.url(""), "Never again?")
    assert (reply.status, stub.completion_calls()) == (429, 1)


@pytest.mark.parametrize("stream", [False, True])
async def test_insufficient_quota_is_never_retried_and_its_body_arrives_intact(
    proxy_factory: ProxyFactory, stub: StubUpstream, stream: bool
) -> None:
    stub.behaviour = rate_limited(failures=None, retry_after_ms="10")
    stub.behaviour.error_code = "insufficient_quota"
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, proxy.url(""), "Is there credit left?", stream=stream)
    assert (reply.status, stub.completion_calls()) == (429, 1)
    assert reply.raw == json.dumps(QUOTA_BODY).encode()
    assert reply.headers["retry-after-ms"] == "10"


async def test_max_retries_bounds_the_attempts_and_the_last_429_is_the_clients(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = rate_limited(failures=None, retry_after_ms="20")
    proxy = await proxy_factory(
        upstream={"max_retries": 2},
        breaker={"window": 4, "min_requests": 2, "failure_share": 0.5},
    )
    async with aiohttp.ClientSession() as s:
        replies = [await ask(s, proxy.url(""), f"Question {n}?") for n in range(3)]
        breaker = await breaker_state(s, proxy.url(""))
    assert [r.status for r in replies] == [429, 429, 429]
    assert all(r.headers["retry-after-ms"] == "20" for r in replies)
    assert stub.completion_calls() == 9  # 1 + max_retries each
    # The upstream pacing its clients is not the upstream failing.
    assert (breaker["state"], breaker["failures_in_window"]) == ("closed", 0)


@pytest.mark.parametrize(
    "behaviour",
    [rate_limited(retry_after_ms="600"), Behaviour(status=503, failures=1)],
    ids=["429-retry-after", "503-backoff"],
)
async def test_the_wait_leaves_the_admission_slot_to_others(
    proxy_factory: ProxyFactory, stub: StubUpstream, behaviour: Behaviour
) -> None:
    stub.behaviour = behaviour
    proxy = await proxy_factory(
        upstream={"max_concurrent": 1, "retry_backoff_s": 0.6, "retry_backoff_max_s": 0.6}
    )
    admission = proxy.app[DEJA].admission
    async with aiohttp.ClientSession() as s:
        waiting = asyncio.create_task(ask(s, proxy.url(""), "First, then told to wait?"))
        await asyncio.sleep(0.15)  # its first attempt was answered; it waits for 0.3-0.6 s
        assert (admission.active, admission.queued) == (0, 0)
        started = time.monotonic()
        other = await ask(s, proxy.url(""), "Second, served meanwhile?")
        took_s = time.monotonic() - started
        first = await waiting
    assert (other.status, other.text) == (200, "Answer to: Second, served meanwhile?")
    assert took_s < 0.2  # not queued behind the waiting call
    assert (first.status, first.text) == (200, "Answer to: First, then told to wait?")
    asked = [c["messages"][0]["content"] for c in stub.calls]
    assert asked == ["First, then told to wait?", "Second, served meanwhile?", *asked[:1]]


async def test_pass_through_reads_are_retried_and_writes_are_not(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        stub.behaviour = rate_limited(retry_after_ms="50")
        async with s.get(proxy.url("/v1/models")) as response:
            models = (response.status, await response.json())
        stub.behaviour, stub.failed = rate_limited(retry_after_ms="50"), 0
        async with s.post(proxy.url("/v1/echo/upload"), data=b"once") as response:
            echo = (response.status, response.headers["retry-after-ms"])
        stub.behaviour, stub.failed = rate_limited(retry_after_ms="50"), 0
        stub.behaviour.error_code = "insufficient_quota"
        async with s.get(proxy.url("/v1/models")) as response:
            quota = (response.status, await response.read())
    assert models == (200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
    assert echo == (429, "50")
    assert quota == (429, json.dumps(QUOTA_BODY).encode())  # read to judge it, still relayed
    assert stub.paths == ["/v1/models"] * 2 + ["/v1/echo/upload"] + ["/v1/models"]


async def test_a_pausing_slot_is_free_meanwhile_and_queues_again() -> None:
    admission = AdmissionControl(max_concurrent=1, max_queued=1, queue_timeout_s=5.0)
    async with admission.slot() as slot:
        pausing = asyncio.create_task(slot.pause(0.05))
        await asyncio.sleep(0.01)
        assert (admission.active, slot.held) == (0, False)
        async with admission.slot():  # another call gets it meanwhile
            await asyncio.sleep(0.1)
            assert admission.queued == 1  # the paused one waits for it again
        await pausing
        assert (admission.active, slot.held) == (1, True)
    assert (admission.active, admission.queued) == (0, 0)


async def test_a_slot_refused_again_after_a_pause_is_not_released_twice() -> None:
    admission = AdmissionControl(max_concurrent=1, max_queued=0, queue_timeout_s=5.0)
    other_entered, release = asyncio.Event(), asyncio.Event()

    async def other() -> None:
        async with admission.slot():
            other_entered.set()
            await release.wait()

    with pytest.raises(RateLimited):
        async with admission.slot() as slot:
            task = asyncio.create_task(slot.pause(0.05))
            await asyncio.sleep(0)
            holder = asyncio.create_task(other())
            await other_entered.wait()
            await task  # the queue is full (max_queued 0): refused
    assert (admission.active, admission.rejected) == (1, 1)
    release.set()
    await holder
    assert admission.active == 0
    async with admission.slot():  # the semaphore counts one slot still
        assert admission.active == 1
