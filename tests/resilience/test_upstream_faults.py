"""Upstream faults with real processes: `deja serve` in front of the stub upstream running as
its own process, which the tests kill, restart, slow down and make fail.

The proxy's config is shortened so the scenarios take seconds: entries live 1 s (then stay for
the grace period, an hour); the breaker judges the last 4 calls and cools down for 1.5 s; one
probe at a time, two successes close it; no retries; 1 s first-byte and read timeouts.

What every scenario asserts about what the client sees: a 200 is a complete answer marked
hit, miss or degraded, and its text is the right answer to its own question (the stub's
answers are a function of the question); a stream that breaks says so with an error event and
never ends with [DONE]; anything else is an OpenAI error object with an upstream status.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.resilience.client import CHAT, Reply, ask, breaker_state, chat
from tests.support import processes
from tests.support.stub_process import StubProcess

COOLDOWN_S = 1.5
TTL_S = 1.0
PROXY_ENV = {
    "DEJA_SEMANTIC__ENABLED": "false",
    "DEJA_SERVER__ACCESS_LOG": "false",
    "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
    "DEJA_UPSTREAM__MAX_RETRIES": "0",
    "DEJA_UPSTREAM__CONNECT_TIMEOUT_S": "1",
    "DEJA_UPSTREAM__FIRST_BYTE_TIMEOUT_S": "1",
    "DEJA_UPSTREAM__READ_TIMEOUT_S": "1",
    "DEJA_TTL__BASE_TTL_S": str(TTL_S),
    "DEJA_TTL__JITTER_MIN": "1",
    "DEJA_TTL__JITTER_MAX": "1",
    "DEJA_BREAKER__WINDOW": "4",
    "DEJA_BREAKER__MIN_REQUESTS": "4",
    "DEJA_BREAKER__COOLDOWN_S": str(COOLDOWN_S),
    "DEJA_BREAKER__HALF_OPEN_PROBES": "1",
    "DEJA_BREAKER__SUCCESSES_TO_CLOSE": "2",
}


# What `fresh_start` leaves: four successes in the window.
PRIMED = {"state": "closed", "requests_in_window": 4, "failures_in_window": 0}


def answer_to(question: str) -> str:
    return f"Answer to: {question}"


@pytest.fixture(scope="module")
def upstream() -> Iterator[StubProcess]:
    stub = StubProcess().start()
    yield stub
    stub.stop()


@pytest.fixture(scope="module")
def proxy(upstream: StubProcess) -> Iterator[str]:
    """One proxy for the module (a start costs seconds); `fresh_start` resets what matters."""
    server = processes.proxy(upstream.base_url, env=PROXY_ENV)
    try:
        server.wait_ready(timeout_s=60)
        yield server.url
    finally:
        server.stop()
    log = server.output()
    # The proxy never died of a fault, and nothing went unhandled.
    assert server.proc.returncode == 0, log
    assert "unhandled error" not in log and "Traceback" not in log, log


@pytest.fixture(autouse=True)
def fresh_start(upstream: StubProcess, proxy: str) -> None:
    """The upstream up and healthy, the breaker closed, its window four successes: each test
    starts from the same known state whatever the one before it did."""
    if upstream.process is None or upstream.process.proc.poll() is not None:
        upstream.start()
    upstream.set_behaviour()
    deadline = time.monotonic() + 10
    while (breaker := readyz(proxy)["breaker"]) != {**breaker, **PRIMED}:
        assert time.monotonic() < deadline, f"the breaker did not settle: {breaker}"
        if post_new_question(proxy) != 200:
            time.sleep(0.1)  # open: wait out the cool-down


def readyz(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/readyz", timeout=5) as response:
        return dict(json.loads(response.read()))


def post_new_question(url: str) -> int:
    body = json.dumps(chat(f"Warm-up question {uuid.uuid4().hex}?")).encode()
    request = urllib.request.Request(
        url + CHAT, data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        with error:  # the error holds the response's socket
            return int(error.code)


def assert_sound(reply: Reply, question: str) -> None:
    """What the module docstring promises about every response."""
    if reply.status == 200 and reply.complete:
        assert reply.cache in ("hit", "miss", "degraded"), reply.headers
        assert reply.text == answer_to(question), (reply.cache, reply.degraded, reply.text)
        assert (reply.degraded is not None) == (reply.cache == "degraded")
    elif reply.status == 200:
        assert reply.streamed and reply.error["type"] == "upstream_error"
        assert "[DONE]" not in reply.events()
    else:
        assert reply.status in (500, 502, 503, 504), reply.raw
        assert reply.error["type"] in ("upstream_error", "server_error")


async def until_fresh(session: aiohttp.ClientSession, url: str, timeout_s: float) -> float:
    """Asks new questions until one is answered by the upstream; the seconds it took."""
    started = time.monotonic()
    for n in itertools.count():
        reply = await ask(session, url, f"Are you back, attempt {n}?")
        assert_sound(reply, f"Are you back, attempt {n}?")
        if reply.cache == "miss" and reply.status == 200:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout_s, f"no fresh answer after {timeout_s} s"
        await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


async def test_upstream_killed_between_requests(upstream: StubProcess, proxy: str) -> None:
    async with aiohttp.ClientSession() as s:
        for question in ("First question?", "Second question?"):
            assert (await ask(s, proxy, question)).cache == "miss"
        await asyncio.sleep(TTL_S + 0.1)  # both expired; kept for the grace period
        upstream.kill()

        stale = await ask(s, proxy, "First question?", stream=True)
        assert_sound(stale, "First question?")
        assert (stale.cache, stale.degraded, stale.streamed) == ("degraded", "stale", True)
        unreachable = await ask(s, proxy, "A new question?")
        assert (unreachable.status, unreachable.error["code"]) == (502, "upstream_unreachable")
        # The window is now [ok ok failed failed]: open. Nothing new reaches the upstream...
        assert (await breaker_state(s, proxy))["state"] == "open"
        refused = await ask(s, proxy, "A new question?")
        assert (refused.status, refused.error["code"]) == (503, "upstream_circuit_open")
        assert refused.headers["Retry-After"] in ("1", "2")
        # ...and what is stored is still served, marked.
        second = await ask(s, proxy, "Second question?")
        assert_sound(second, "Second question?")
        assert second.degraded == "stale"

        tripped_at = time.monotonic()
        upstream.start()
        recovered_s = await until_fresh(s, proxy, timeout_s=10)
        assert time.monotonic() - tripped_at < COOLDOWN_S + 3.0
        assert recovered_s > 0
        assert (await breaker_state(s, proxy))["state"] in ("half_open", "closed")
        fresh = await ask(s, proxy, "First question?")
        hit = await ask(s, proxy, "First question?")
    assert (fresh.cache, hit.cache) == ("miss", "hit")
    assert hit.text == answer_to("First question?")


async def test_upstream_killed_mid_stream(upstream: StubProcess, proxy: str) -> None:
    words = " ".join(f"word{i}" for i in range(30))
    upstream.set_behaviour(answer=words, chunk_delay_s=0.1)
    question = "Tell me thirty words."
    async with aiohttp.ClientSession() as s:
        plain = asyncio.create_task(ask(s, proxy, question))  # waits on the same call
        async with s.post(proxy + CHAT, json=chat(question, stream=True)) as response:
            assert response.status == 200
            seen = b""
            while seen.count(b"data: ") < 4:
                seen += await response.content.readline()
            upstream.kill()
            streamed = Reply(response.status, response.headers.copy(), seen + await response.read())
        waiter = await plain
    assert not streamed.complete and "[DONE]" not in streamed.events()
    assert streamed.error["code"] == "upstream_bad_response"
    assert words.startswith(streamed.text) and len(streamed.text) < len(words)
    assert (waiter.status, waiter.error["code"]) == (502, "upstream_bad_response")
    assert waiter.headers.get("X-Deja-Coalesced") == "1"

    upstream.start()
    upstream.set_behaviour()
    async with aiohttp.ClientSession() as s:
        after = await ask(s, proxy, question, stream=True)
        again = await ask(s, proxy, question)
    # Nothing of the broken answer was kept: a miss that stores the whole new answer.
    assert (after.cache, after.complete, after.text) == ("miss", True, answer_to(question))
    assert (again.cache, again.text) == ("hit", answer_to(question))


async def test_upstream_failing_with_500s_then_slow(upstream: StubProcess, proxy: str) -> None:
    async with aiohttp.ClientSession() as s:
        await ask(s, proxy, "Cached question?")
        await asyncio.sleep(TTL_S + 0.1)
        upstream.set_behaviour(status=500)
        calls = upstream.calls()
        stale = await ask(s, proxy, "Cached question?")  # a degraded answer beats the 500
        assert_sound(stale, "Cached question?")
        assert stale.degraded == "stale"
        failed = await ask(s, proxy, "New question?")
        assert (failed.status, failed.error["message"]) == (500, "stub failure 500")
        refused = await ask(s, proxy, "New question?")  # [ok ok failed failed]
        assert (refused.status, refused.error["code"]) == (503, "upstream_circuit_open")
        assert refused.headers["Retry-After"] in ("1", "2")
        assert upstream.calls() == calls + 2

        upstream.set_behaviour()
        await until_fresh(s, proxy, timeout_s=COOLDOWN_S + 3)
        assert (await ask(s, proxy, "Cached question?")).cache == "miss"
        await asyncio.sleep(TTL_S + 0.1)

        upstream.set_behaviour(delay_s=5)  # slower than the 1 s first-byte timeout
        started = time.monotonic()
        slow_stale = await ask(s, proxy, "Cached question?", stream=True)
        timed_out = await ask(s, proxy, "Slow new question?")
        elapsed_s = time.monotonic() - started
    assert_sound(slow_stale, "Cached question?")
    assert slow_stale.degraded == "stale"
    assert (timed_out.status, timed_out.error["code"]) == (504, "upstream_timeout")
    assert elapsed_s < 2 * 1.0 + 1.0  # two first-byte timeouts, not the stub's 5 s


async def test_a_flapping_upstream_never_gives_a_wrong_or_unmarked_answer(
    upstream: StubProcess, proxy: str
) -> None:
    questions = [f"Recurring question {i}?" for i in range(4)]
    replies: list[tuple[str, Reply]] = []
    stop = asyncio.Event()

    async def client(session: aiohttp.ClientSession, offset: int) -> None:
        for n in itertools.count(offset):
            if stop.is_set():
                return
            question = questions[n % 4] if n % 3 else f"One-off question {offset}-{n}?"
            replies.append((question, await ask(session, proxy, question, stream=n % 2 == 0)))
            await asyncio.sleep(0.02)

    async with aiohttp.ClientSession() as s:
        for question in questions:
            await ask(s, proxy, question)
        clients = [asyncio.create_task(client(s, offset)) for offset in (0, 1000)]
        for _ in range(4):
            await asyncio.sleep(0.4)
            upstream.kill()
            await asyncio.sleep(0.4)
            await asyncio.to_thread(upstream.start)
        stop.set()
        await asyncio.gather(*clients)
        await until_fresh(s, proxy, timeout_s=COOLDOWN_S + 3)
        after = {q: await ask(s, proxy, q) for q in questions}

    for question, reply in replies:
        assert_sound(reply, question)
    kinds = {(r.status, r.cache) for _, r in replies}
    assert (200, "hit") in kinds and len(replies) > 50
    # Nothing half-written was stored: every recurring question has its whole answer.
    for question, reply in after.items():
        assert reply.complete and reply.text == answer_to(question)
