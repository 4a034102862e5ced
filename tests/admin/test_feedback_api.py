"""POST /admin/v1/feedback through a proxy: TTLs recomputed, eviction from LRU-K and Redis,
feedback by request id, and bad input."""

from __future__ import annotations

import aiohttp
import pytest
import redis

from tests.admin.conftest import Client, admin_sections
from tests.conftest import ProxyFactory
from tests.support.stub_upstream import StubUpstream

QUESTION = "How do I reset my password?"


def redis_entries(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return len(client.keys("deja:v1:*:e:*"))


async def test_feedback_retimes_the_entry_and_hits_carry_the_new_ttl(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    entry_id = await client.stored(QUESTION)
    hit = await client.ask(QUESTION)
    assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-TTL"]) == ("hit", "300")
    assert hit.headers["X-Deja-Entry"] == entry_id

    useful = await client.admin("POST", "feedback", {"entry_id": entry_id, "signal": "useful"})
    assert useful.status == 200
    assert useful.body == {
        "entry_id": entry_id,
        "evicted": False,
        "feedback": [1.2],
        "feedback_sum": 1.2,
        "ttl_s": 390.0,
        "threshold": useful.body["threshold"],
    }
    assert (await client.ask(QUESTION)).headers["X-Deja-TTL"] == "390"

    numeric = await client.admin("POST", "feedback", {"entry_id": entry_id, "signal": -0.4})
    assert numeric.body["feedback"] == [1.2, -0.4] and numeric.body["ttl_s"] == 360.0
    described = await client.wait_for_entry(entry_id)
    assert (described["ttl_s"], described["feedback"]) == (360.0, [1.2, -0.4])


@pytest.mark.redis
async def test_two_irrelevant_signals_evict_from_lru_k_and_redis(
    proxy_factory: ProxyFactory,
    session: aiohttp.ClientSession,
    stub: StubUpstream,
    redis_url: str,
) -> None:
    client = Client(session, await proxy_factory(**admin_sections(redis={"url": redis_url})))
    entry_id = await client.stored(QUESTION)
    assert redis_entries(redis_url) == 1

    first = await client.admin("POST", "feedback", {"entry_id": entry_id, "signal": "irrelevant"})
    assert (first.body["evicted"], first.body["ttl_s"]) == (False, 240.0)
    assert (await client.ask(QUESTION)).headers["X-Deja-TTL"] == "240"
    second = await client.admin("POST", "feedback", {"entry_id": entry_id, "signal": "irrelevant"})
    assert second.status == 200
    assert (second.body["evicted"], second.body["feedback_sum"]) == (True, -1.6)

    assert redis_entries(redis_url) == 0
    assert (await client.admin("GET", f"entries/{entry_id}")).status == 404
    calls = stub.completion_calls()
    again = await client.ask(QUESTION)
    assert again.headers["X-Deja-Cache"] == "miss"
    assert stub.completion_calls() == calls + 1
    stats = await client.admin("GET", "stats")
    assert stats.body["evictions_by_feedback"] == 1
    # Feedback on an entry that is gone is a 404.
    gone = await client.admin("POST", "feedback", {"entry_id": entry_id, "signal": "useful"})
    assert gone.status == 404


@pytest.mark.redis
async def test_feedback_on_one_proxy_is_seen_by_another_through_redis(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    sections = admin_sections(redis={"url": redis_url}, lru_k={"enabled": False})
    a = Client(session, await proxy_factory(**sections))
    b = Client(session, await proxy_factory(**sections))
    entry_id = await a.stored(QUESTION)
    await a.admin("POST", "feedback", {"entry_id": entry_id, "signal": "useful"})
    hit = await b.ask(QUESTION)
    assert (hit.headers["X-Deja-Tier"], hit.headers["X-Deja-TTL"]) == ("redis", "390")


async def test_feedback_by_request_id_of_the_miss_and_of_a_hit(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    miss = await client.ask(QUESTION, headers={"X-Request-Id": "req-miss"})
    entry_id = miss.headers["X-Deja-Entry"]
    await client.wait_for_entry(entry_id)
    hit = await client.ask(QUESTION)
    hit_id = hit.headers["X-Request-Id"]

    by_miss = await client.admin("POST", "feedback", {"request_id": "req-miss", "signal": 1.2})
    assert (by_miss.status, by_miss.body["entry_id"]) == (200, entry_id)
    by_hit = await client.admin("POST", "feedback", {"request_id": hit_id, "signal": "useful"})
    assert by_hit.body["feedback"] == [1.2, 1.2] and by_hit.body["ttl_s"] == 450.0
    unknown = await client.admin("POST", "feedback", {"request_id": "never", "signal": 1})
    assert unknown.status == 404


async def test_a_request_that_was_not_stored_has_nothing_to_give_feedback_on(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    reply = await client.ask(QUESTION, headers={"Cache-Control": "no-store", "X-Request-Id": "r1"})
    assert reply.status == 200 and "X-Deja-Entry" not in reply.headers
    feedback = await client.admin("POST", "feedback", {"request_id": "r1", "signal": -0.8})
    assert feedback.status == 404


@pytest.mark.parametrize(
    "payload",
    [
        {"entry_id": "x"},
        {"entry_id": "x", "signal": "great"},
        {"entry_id": "x", "signal": True},
        {"entry_id": "x", "signal": None},
        {"signal": "useful"},
        {"entry_id": 42, "signal": "useful"},
        [1, 2],
    ],
)
async def test_bad_feedback_bodies_get_400(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, payload: object
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    reply = await client.admin("POST", "feedback", payload)
    assert reply.status == 400, reply.body
    assert reply.body["error"]["type"] == "invalid_request_error"


async def test_feedback_that_is_not_json_gets_400(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    reply = await client.call(
        "POST",
        "/admin/v1/feedback",
        data=b"{oops",
        headers={"Authorization": "Bearer admin-secret"},
    )
    assert reply.status == 400
