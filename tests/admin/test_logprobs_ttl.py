"""Logprobs Deja asks for on its own account: stripped from what the client sees (streamed
too), and the entry's TTL follows the answer's certainty; X-Deja-Store-TTL caps it; hits carry
X-Deja-TTL and Age.

The stub answers every token with probability p and spreads 1 − p evenly over the other k − 1
alternatives, so with k = 5: H = −(p ln p + (1−p) ln((1−p)/4)), certainty = 1 − H / ln 6,
TTL = 300 × clamp(0.5 p + 0.5 certainty, 0.3, 1.5) (jitter pinned to 1).
"""

from __future__ import annotations

import json

import aiohttp
import pytest

from core.clock import ManualClock
from tests.admin.conftest import CHAT, Client, admin_sections
from tests.conftest import ProxyFactory
from tests.support.stub_upstream import StubUpstream

LOGPROBS_ON = admin_sections(upstream={"request_logprobs": True})


async def stream_chunks(client: Client, question: str) -> tuple[dict[str, str], list[dict]]:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": question}]}
    async with client.session.post(client.proxy.url(CHAT), json=body) as response:
        assert response.status == 200
        raw = (await response.read()).decode()
    events = [e[len("data: ") :] for e in raw.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return dict(response.headers), [json.loads(e) for e in events[:-1]]


@pytest.mark.parametrize(
    "p,ttl",
    [
        (0.99, "293"),  # certainty 0.9610 → 300 × 0.9755
        (0.9, "246"),  # certainty 0.7412 → 300 × 0.8206
        (0.3, "90"),  # certainty 0.1175 → 0.2087, clamped up to 0.3
    ],
)
async def test_the_ttl_follows_the_answers_certainty(
    proxy_factory: ProxyFactory,
    session: aiohttp.ClientSession,
    stub: StubUpstream,
    p: float,
    ttl: str,
) -> None:
    stub.behaviour.token_probability = p
    client = Client(session, await proxy_factory(**LOGPROBS_ON))
    miss = await client.ask("How sure are you?")
    assert (stub.calls[-1]["logprobs"], stub.calls[-1]["top_logprobs"]) == (True, 5)
    assert miss.body["choices"][0]["logprobs"] is None  # stripped: the client did not ask
    entry = await client.wait_for_entry(miss.headers["X-Deja-Entry"])
    assert entry["confidence"] == pytest.approx(p)
    assert entry["completion"]["choices"][0]["logprobs"] is None  # not stored either
    hit = await client.ask("How sure are you?")
    assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-TTL"]) == ("hit", ttl)
    assert hit.body["choices"][0]["logprobs"] is None


async def test_streamed_answers_are_stripped_and_timed_alike(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, stub: StubUpstream
) -> None:
    client = Client(session, await proxy_factory(**LOGPROBS_ON))
    headers, chunks = await stream_chunks(client, "How sure are you?")
    assert stub.calls[-1]["logprobs"] is True and stub.calls[-1]["stream"] is True
    assert len(chunks) > 3
    assert all(c["choices"][0]["logprobs"] is None for c in chunks if c["choices"])
    assert all("usage" not in c for c in chunks)  # Deja's own include_usage is hidden too
    entry = await client.wait_for_entry(headers["X-Deja-Entry"])
    assert entry["certainty"] == pytest.approx(0.741197, abs=1e-6)
    hit = await client.ask("How sure are you?")
    assert hit.headers["X-Deja-TTL"] == "246"
    # A streamed hit replays the stored answer, without logprobs.
    _, replay = await stream_chunks(client, "How sure are you?")
    assert all(c["choices"][0].get("logprobs") is None for c in replay if c["choices"])


async def test_a_client_that_asks_for_logprobs_gets_them_and_its_k_counts(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, stub: StubUpstream
) -> None:
    client = Client(session, await proxy_factory(**LOGPROBS_ON))
    miss = await client.ask("How sure are you?", logprobs=True, top_logprobs=2)
    assert stub.calls[-1]["top_logprobs"] == 2  # the client's request is not changed
    tokens = miss.body["choices"][0]["logprobs"]["content"]
    assert len(tokens[0]["top_logprobs"]) == 2
    await client.wait_for_entry(miss.headers["X-Deja-Entry"])
    # top-2 (0.9, 0.1): H = 0.3251, Hmax = ln 3 → certainty 0.7041 → 300 × 0.8020.
    hit = await client.ask("How sure are you?", logprobs=True, top_logprobs=2)
    assert hit.headers["X-Deja-TTL"] == "241"
    assert hit.body["choices"][0]["logprobs"]["content"] == tokens


async def test_legacy_completions_logprobs_are_stripped_and_used(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, stub: StubUpstream
) -> None:
    client = Client(session, await proxy_factory(**LOGPROBS_ON))
    body = {"model": "m", "prompt": "Say something"}
    miss = await client.call("POST", "/v1/completions", body)
    assert stub.calls[-1]["logprobs"] == 5
    assert miss.body["choices"][0]["logprobs"] is None
    await client.wait_for_entry(miss.headers["X-Deja-Entry"])
    # The stub returns top-1 maps: H = 0.3251, Hmax = ln 2 → certainty 0.5310 → 300 × 0.7155.
    hit = await client.call("POST", "/v1/completions", body)
    assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-TTL"]) == ("hit", "215")


async def test_an_upstream_refusing_logprobs_is_asked_again_plainly(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, stub: StubUpstream
) -> None:
    stub.behaviour.reject_logprobs = True
    client = Client(session, await proxy_factory(**LOGPROBS_ON))
    miss = await client.ask("How sure are you?")
    assert miss.status == 200
    assert [c.get("logprobs") for c in stub.calls] == [True, None]
    await client.wait_for_entry(miss.headers["X-Deja-Entry"])
    assert (await client.ask("How sure are you?")).headers["X-Deja-TTL"] == "300"


async def test_store_ttl_caps_the_ttl_and_age_counts_from_the_store(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    clock = ManualClock()
    client = Client(session, await proxy_factory(clock=clock, **admin_sections()))
    entry_id = await client.stored("Short-lived?", headers={"X-Deja-Store-TTL": "60"})
    assert (await client.wait_for_entry(entry_id))["ttl_s"] == 60.0
    clock.advance(42.5)
    hit = await client.ask("Short-lived?")
    assert (hit.headers["X-Deja-TTL"], hit.headers["Age"]) == ("60", "42")
    clock.advance(20)  # 62.5 s old: expired
    assert (await client.ask("Short-lived?")).headers["X-Deja-Cache"] == "miss"
    # A cap above the computed TTL changes nothing.
    entry_id = await client.stored("Long-lived?", headers={"X-Deja-Store-TTL": "9999"})
    assert (await client.wait_for_entry(entry_id))["ttl_s"] == 300.0
