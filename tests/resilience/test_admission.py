"""Admission control: a bound on upstream calls in progress and on calls queued for a slot."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from core.errors import RateLimited
from proxy.answering.admission import AdmissionControl
from tests.conftest import ProxyFactory
from tests.resilience.client import ask
from tests.support.stub_upstream import Behaviour, StubUpstream


async def hold(
    admission: AdmissionControl, release: asyncio.Event, log: list[str], name: str
) -> None:
    async with admission.slot():
        log.append(name)
        await release.wait()


async def settle() -> None:
    """Lets every task that can run, run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_calls_past_the_concurrency_bound_queue_in_order() -> None:
    admission = AdmissionControl(max_concurrent=2, max_queued=2, queue_timeout_s=5.0)
    release = [asyncio.Event() for _ in range(4)]
    entered: list[str] = []
    tasks = [
        asyncio.create_task(hold(admission, release[i], entered, f"call{i}")) for i in range(4)
    ]
    await settle()
    assert entered == ["call0", "call1"]
    assert (admission.active, admission.queued) == (2, 2)
    release[1].set()
    await settle()
    assert entered == ["call0", "call1", "call2"]  # first queued, first served
    assert (admission.active, admission.queued) == (2, 1)
    for event in release:
        event.set()
    await asyncio.gather(*tasks)
    assert entered == ["call0", "call1", "call2", "call3"]
    assert (admission.active, admission.queued, admission.rejected) == (0, 0, 0)


async def test_a_full_queue_refuses_at_once_with_retry_after() -> None:
    admission = AdmissionControl(max_concurrent=1, max_queued=1, queue_timeout_s=5.0)
    release = asyncio.Event()
    entered: list[str] = []
    running = asyncio.create_task(hold(admission, release, entered, "running"))
    queued = asyncio.create_task(hold(admission, release, entered, "queued"))
    await settle()
    with pytest.raises(RateLimited) as refused:
        async with admission.slot():
            raise AssertionError("a third call must not get a slot")
    assert (refused.value.status, refused.value.retry_after_s) == (429, 1)
    assert refused.value.error_type == "rate_limit_error"
    assert (admission.active, admission.queued, admission.rejected) == (1, 1, 1)
    release.set()
    await asyncio.gather(running, queued)
    assert entered == ["running", "queued"]


async def test_no_queue_means_refusing_as_soon_as_every_slot_is_busy() -> None:
    admission = AdmissionControl(max_concurrent=1, max_queued=0, queue_timeout_s=5.0)
    release = asyncio.Event()
    running = asyncio.create_task(hold(admission, release, [], "running"))
    await settle()
    with pytest.raises(RateLimited):
        async with admission.slot():
            pass
    release.set()
    await running
    async with admission.slot():  # free again
        assert admission.active == 1


async def test_a_call_queued_past_the_timeout_is_refused() -> None:
    admission = AdmissionControl(max_concurrent=1, max_queued=4, queue_timeout_s=0.05)
    release = asyncio.Event()
    running = asyncio.create_task(hold(admission, release, [], "running"))
    await settle()
    started = asyncio.get_running_loop().time()
    with pytest.raises(RateLimited) as refused:
        async with admission.slot():
            pass
    waited = asyncio.get_running_loop().time() - started
    assert refused.value.retry_after_s == 2
    assert 0.04 <= waited < 1.0
    assert (admission.active, admission.queued, admission.rejected) == (1, 0, 1)
    release.set()
    await running


async def test_a_queued_call_that_is_cancelled_leaves_the_queue() -> None:
    admission = AdmissionControl(max_concurrent=1, max_queued=1, queue_timeout_s=5.0)
    release = asyncio.Event()
    running = asyncio.create_task(hold(admission, release, [], "running"))
    waiting = asyncio.create_task(hold(admission, release, [], "waiting"))
    await settle()
    assert admission.queued == 1
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert admission.queued == 0
    release.set()
    await running
    assert (admission.active, admission.queued) == (0, 0)
    async with admission.slot():
        assert admission.active == 1


async def test_the_proxy_answers_429_past_its_bounds_and_still_serves_hits(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory(upstream={"max_concurrent": 1, "max_queued": 1})
    url = f"http://127.0.0.1:{proxy.server.port}"
    async with aiohttp.ClientSession() as s:
        cached = await ask(s, url, "Cached question?")
        stub.behaviour = Behaviour(delay_s=0.5)
        running = asyncio.create_task(ask(s, url, "Slow question 1?"))
        queued = asyncio.create_task(ask(s, url, "Slow question 2?"))
        await asyncio.sleep(0.2)  # one call holds the slot, one waits for it
        refused = await ask(s, url, "Slow question 3?", stream=True)
        hit = await ask(s, url, "Cached question?")  # hits never wait for a slot
        done = await asyncio.gather(running, queued)
    assert (refused.status, refused.headers["Retry-After"]) == (429, "1")
    assert (refused.error["type"], refused.error["code"]) == ("rate_limit_error", "rate_limited")
    assert (hit.status, hit.cache, hit.text) == (200, "hit", cached.text)
    assert [(r.status, r.cache) for r in done] == [(200, "miss"), (200, "miss")]
    assert stub.completion_calls() == 3
