"""Degraded answers through an in-process proxy in front of the stub, time driven by a
ManualClock: stale entries, the fallback template, 503s, the breaker opening and recovering.

Every entry lives 60 s (no jitter) and stays 3600 s more for degraded answers; the breaker
judges windows of four calls and cools down for 10 s.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from core.clock import ManualClock
from tests.conftest import ProxyFactory
from tests.resilience.client import Reply, ask, breaker_state
from tests.support.stub_upstream import Behaviour, StubUpstream

TTL_S = 60
SECTIONS: dict[str, dict[str, Any]] = {
    "upstream": {"max_retries": 0},
    "ttl": {"base_ttl_s": TTL_S, "jitter_min": 1, "jitter_max": 1},
    "breaker": {
        "window": 4,
        "min_requests": 4,
        "cooldown_s": 10,
        "half_open_probes": 1,
        "successes_to_close": 2,
    },
}


async def start(
    proxy_factory: ProxyFactory, clock: ManualClock, **overrides: dict[str, Any]
) -> str:
    """A proxy with SECTIONS (plus `overrides`) on `clock`; its base URL."""
    sections = {name: dict(values) for name, values in SECTIONS.items()}
    for name, values in overrides.items():
        sections.setdefault(name, {}).update(values)
    proxy = await proxy_factory(clock=clock, **sections)
    return f"http://127.0.0.1:{proxy.server.port}"


def assert_stale(reply: Reply, original: Reply, stream: bool) -> None:
    assert reply.status == 200, reply.raw
    assert (reply.cache, reply.degraded) == ("degraded", "stale")
    assert reply.streamed is stream and reply.complete
    assert reply.text == original.text
    assert reply.headers["X-Deja-Entry"] == original.headers["X-Deja-Entry"]
    assert reply.headers["X-Deja-Match"] == "exact"


@pytest.mark.parametrize("stream", [False, True])
async def test_an_expired_entry_is_served_stale_when_the_upstream_fails(
    proxy_factory: ProxyFactory, stub: StubUpstream, stream: bool
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock)
    async with aiohttp.ClientSession() as s:
        original = await ask(s, url, "What is the boiling point of water?")
        assert original.cache == "miss" and original.text
        clock.advance(TTL_S + 1)
        stub.behaviour = Behaviour(status=500)
        reply = await ask(s, url, "What is the boiling point of water?", stream)
        assert_stale(reply, original, stream)
        assert reply.headers["X-Deja-Tier"] == "lru_k"
        if not stream:
            assert reply.json()["id"] != original.json()["id"]
        # Once the upstream answers again, the expired entry is replaced, not served.
        stub.behaviour = Behaviour(answer=lambda body: "One hundred degrees Celsius.")
        fresh = await ask(s, url, "What is the boiling point of water?")
        again = await ask(s, url, "What is the boiling point of water?")
    assert (fresh.cache, fresh.text) == ("miss", "One hundred degrees Celsius.")
    assert (again.cache, again.text) == ("hit", "One hundred degrees Celsius.")
    assert stub.completion_calls() == 3


async def test_past_the_grace_period_nothing_stale_is_served(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock, degrade={"stale_grace_s": 100})
    async with aiohttp.ClientSession() as s:
        await ask(s, url, "What is the boiling point of water?")
        clock.advance(TTL_S + 99)
        stub.behaviour = Behaviour(status=500)
        within = await ask(s, url, "What is the boiling point of water?")
        clock.advance(1)
        past = await ask(s, url, "What is the boiling point of water?")
    assert within.degraded == "stale"
    assert (past.status, past.cache, past.degraded) == (500, "miss", None)
    assert past.error["message"] == "stub failure 500"


@pytest.mark.parametrize(
    "status,degraded", [(500, True), (502, True), (503, True), (400, False), (404, False),
                        (422, False), (429, False)]
)  # fmt: skip
async def test_a_degraded_answer_wins_over_a_5xx_but_never_over_a_4xx(
    proxy_factory: ProxyFactory, stub: StubUpstream, status: int, degraded: bool
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock)
    async with aiohttp.ClientSession() as s:
        original = await ask(s, url, "Name a prime number.")
        clock.advance(TTL_S + 1)
        stub.behaviour = Behaviour(status=status)
        reply = await ask(s, url, "Name a prime number.")
    if degraded:
        assert_stale(reply, original, stream=False)
    else:
        assert (reply.status, reply.cache, reply.degraded) == (status, "miss", None)
        assert reply.error["message"] == f"stub failure {status}"  # the upstream's own body


async def test_requests_that_skip_the_lookup_still_get_a_stored_answer_when_the_upstream_fails(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock)
    async with aiohttp.ClientSession() as s:
        original = await ask(s, url, "Name a prime number.")
        stub.behaviour = Behaviour(status=503)
        # no-cache skips the lookup; with the upstream failing, the stored (still fresh)
        # answer beats an error, and says it is degraded.
        reply = await ask(s, url, "Name a prime number.", headers={"Cache-Control": "no-cache"})
    assert_stale(reply, original, stream=False)


async def test_coalesced_waiters_all_get_the_degraded_answer(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock)
    async with aiohttp.ClientSession() as s:
        original = await ask(s, url, "Name a prime number.")
        clock.advance(TTL_S + 1)
        stub.behaviour = Behaviour(status=500, delay_s=0.3)
        replies = await asyncio.gather(
            *(ask(s, url, "Name a prime number.", stream=i % 2 == 1) for i in range(4))
        )
    for i, reply in enumerate(replies):
        assert_stale(reply, original, stream=i % 2 == 1)
    assert [r.headers.get("X-Deja-Coalesced") for r in replies].count("1") == 3
    assert stub.completion_calls() == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_the_fallback_template_answers_when_nothing_stored_can(
    proxy_factory: ProxyFactory, stub: StubUpstream, stream: bool
) -> None:
    clock = ManualClock()
    template = "{model} is not available right now; please try again in a minute."
    url = await start(proxy_factory, clock, degrade={"fallback_template": template})
    async with aiohttp.ClientSession() as s:
        original = await ask(s, url, "Name a prime number.")
        clock.advance(TTL_S + 1)
        stub.behaviour = Behaviour(status=500)
        fallback = await ask(s, url, "Name an even number.", stream)
        stale = await ask(s, url, "Name a prime number.", stream)  # stale comes first
        stub.behaviour = Behaviour()
        after = await ask(s, url, "Name an even number.")
    assert (fallback.status, fallback.cache, fallback.degraded) == (200, "degraded", "fallback")
    assert fallback.streamed is stream and fallback.complete
    assert fallback.text == "m is not available right now; please try again in a minute."
    assert "X-Deja-Entry" not in fallback.headers and "X-Deja-Tier" not in fallback.headers
    assert_stale(stale, original, stream)
    assert (after.cache, after.text) == ("miss", "Answer to: Name an even number.")  # not stored


async def test_with_nothing_to_serve_the_upstream_error_passes_through(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock)
    stub.behaviour = Behaviour(status=500)
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, url, "Name a prime number.")
    assert (reply.status, reply.cache, reply.error["message"]) == (500, "miss", "stub failure 500")
    assert "Retry-After" not in reply.headers


@pytest.mark.parametrize(
    "behaviour,unreachable,expected",
    [
        (Behaviour(status=500), False, 503),
        (Behaviour(), True, 503),
        (Behaviour(status=400), False, 400),  # a 4xx is the client's: always passed on
    ],
)
async def test_unavailable_503_turns_upstream_failures_into_503_with_retry_after(
    proxy_factory: ProxyFactory,
    stub: StubUpstream,
    behaviour: Behaviour,
    unreachable: bool,
    expected: int,
) -> None:
    clock = ManualClock()
    upstream = {"url": "http://127.0.0.1:9/v1"} if unreachable else {}
    url = await start(proxy_factory, clock, degrade={"unavailable_503": True}, upstream=upstream)
    stub.behaviour = behaviour
    async with aiohttp.ClientSession() as s:
        reply = await ask(s, url, "Name a prime number.")
    assert reply.status == expected
    if expected == 503:
        # One failure leaves the breaker closed: try again in a second. (With the breaker open,
        # Retry-After is its remaining cool-down: see the breaker tests below.)
        assert reply.headers["Retry-After"] == "1"
        assert reply.error["type"] == "upstream_error"
        assert reply.error["code"] == "upstream_unavailable"
    else:
        assert reply.error["message"] == "stub failure 400"


async def test_the_breaker_opens_serves_from_cache_and_recovers_after_the_cool_down(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock)
    async with aiohttp.ClientSession() as s:
        expired = await ask(s, url, "Expired question?")
        clock.advance(TTL_S + 1)
        fresh = await ask(s, url, "Fresh question?")
        stub.behaviour = Behaviour(status=500)
        for i in range(2):
            assert (await ask(s, url, f"New question {i}?")).status == 500
        state = await breaker_state(s, url)  # the window: [200 200 500 500]
        assert (state["state"], state["trips"], state["retry_after_s"]) == ("open", 1, 10)
        calls = stub.completion_calls()

        # Open: what is stored is served, marked when it is stale; nothing reaches upstream.
        hit = await ask(s, url, "Fresh question?")
        assert (hit.cache, hit.text) == ("hit", fresh.text)
        assert_stale(await ask(s, url, "Expired question?", stream=True), expired, stream=True)
        refused = await ask(s, url, "New question 0?")
        assert (refused.status, refused.headers["Retry-After"]) == (503, "10")
        assert (refused.error["type"], refused.error["code"]) == (
            "upstream_error",
            "upstream_circuit_open",
        )
        clock.advance(4)
        assert (await ask(s, url, "New question 0?")).headers["Retry-After"] == "6"
        assert stub.completion_calls() == calls

        # Cool-down over: half-open lets one probe through; two successes close it.
        clock.advance(6)
        stub.behaviour = Behaviour()
        first = await ask(s, url, "New question 0?")
        assert (first.status, first.cache) == (200, "miss")
        assert (await breaker_state(s, url))["state"] == "half_open"
        second = await ask(s, url, "Expired question?")
        assert (second.cache, second.degraded) == ("miss", None)  # fresh again
        assert (await breaker_state(s, url))["state"] == "closed"
    assert stub.completion_calls() == calls + 2


async def test_a_failed_probe_reopens_the_breaker(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock)
    stub.behaviour = Behaviour(status=502)
    async with aiohttp.ClientSession() as s:
        for i in range(4):
            await ask(s, url, f"Question {i}?")
        clock.advance(10)
        probe = await ask(s, url, "Question 0?")
        assert probe.status == 502  # the probe went upstream and failed
        state = await breaker_state(s, url)
        assert (state["state"], state["trips"], state["retry_after_s"]) == ("open", 2, 10)
        assert (await ask(s, url, "Question 1?")).status == 503
    assert stub.completion_calls() == 5


async def test_client_errors_never_count_against_the_upstream(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock)
    stub.behaviour = Behaviour(status=400)
    async with aiohttp.ClientSession() as s:
        for i in range(6):
            assert (await ask(s, url, f"Question {i}?")).status == 400
        state = await breaker_state(s, url)
        assert (state["state"], state["failures_in_window"], state["requests_in_window"]) == (
            "closed",
            0,
            4,
        )
        stub.behaviour = Behaviour(status=500)
        for i in range(2):
            await ask(s, url, f"Question {i}?")
        assert (await breaker_state(s, url))["state"] == "open"  # [400 400 500 500]: 50%


async def test_a_slow_upstream_times_out_into_a_504_or_a_stale_answer(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock, upstream={"first_byte_timeout_s": 0.3})
    async with aiohttp.ClientSession() as s:
        original = await ask(s, url, "Name a prime number.")
        clock.advance(TTL_S + 1)
        stub.behaviour = Behaviour(delay_s=5)
        started = asyncio.get_running_loop().time()
        stale = await ask(s, url, "Name a prime number.")
        timed_out = await ask(s, url, "Name an even number.", stream=True)
        elapsed = asyncio.get_running_loop().time() - started
    assert_stale(stale, original, stream=False)
    assert (timed_out.status, timed_out.streamed) == (504, False)
    assert (timed_out.error["type"], timed_out.error["code"]) == (
        "upstream_error",
        "upstream_timeout",
    )
    assert elapsed < 2.0


async def test_a_stream_that_goes_silent_is_cut_and_not_stored(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock, upstream={"read_timeout_s": 0.3})
    stub.behaviour = Behaviour(chunk_delay_s=1.0)
    async with aiohttp.ClientSession() as s:
        cut = await ask(s, url, "Tell me a long story.", stream=True)
        assert (cut.status, cut.complete) == (200, False)
        assert cut.error["code"] == "upstream_timeout"
        assert "[DONE]" not in cut.events()
        stub.behaviour = Behaviour()
        after = await ask(s, url, "Tell me a long story.")
        again = await ask(s, url, "Tell me a long story.")
    assert (after.cache, again.cache) == ("miss", "hit")
    assert again.text == "Answer to: Tell me a long story."


async def test_retries_happen_only_before_any_byte_reached_the_client(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    clock = ManualClock()
    url = await start(proxy_factory, clock, upstream={"max_retries": 2, "retry_backoff_s": 0.01})
    async with aiohttp.ClientSession() as s:
        stub.behaviour = Behaviour(status=503)
        failed = await ask(s, url, "Name a prime number.")
        assert (failed.status, stub.completion_calls()) == (503, 3)  # one call, two retries
        state = await breaker_state(s, url)
        assert (state["failures_in_window"], state["requests_in_window"]) == (1, 1)
        stub.behaviour = Behaviour(
            answer=lambda body: "one two three four five", drop_after_chunks=3
        )
        broken = await ask(s, url, "Count to five.", stream=True)
    assert broken.status == 200 and not broken.complete
    assert broken.text == "one two "  # what was sent before the break, never sent twice
    assert stub.completion_calls() == 4  # bytes had reached the client: no retry
