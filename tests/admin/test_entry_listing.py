"""GET /admin/v1/entries: the newest entries across LRU-K and Redis, filtered and limited."""

from __future__ import annotations

import aiohttp
import pytest

from tests.admin.conftest import Client, admin_sections
from tests.admin.test_entries_invalidate import Population
from tests.conftest import ProxyFactory

pytestmark = pytest.mark.redis


async def test_the_listing_is_newest_first_and_filtered_like_invalidation(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    client = Client(session, await proxy_factory(**admin_sections(redis={"url": redis_url})))
    population = Population(client)
    await population.store()
    everything = (await client.admin("GET", "entries")).body
    assert everything["total"] == 5
    newest_first = [population.ids[row] for row in reversed(Population.ROWS)]
    assert [e["entry_id"] for e in everything["entries"]] == newest_first
    first = everything["entries"][-1]
    assert (first["namespace"], first["model"], first["route"]) == ("", "m", "chat")
    assert (first["ttl_s"], first["fresh"], first["feedback_sum"]) == (300.0, True, 0.0)
    assert first["answer"] == "Answer to: Which tiers does Deja have?"

    bob = (await client.wait_for_entry(population.ids[("sk-bob", "", "m")]))["tenant"]
    by_bob = (await client.admin("GET", f"entries?tenant={bob}")).body
    assert [e["entry_id"] for e in by_bob["entries"]] == [
        population.ids[("sk-bob", "", "other")],
        population.ids[("sk-bob", "", "m")],
    ]
    docs = (await client.admin("GET", "entries?namespace=docs&model=m")).body
    assert docs == {"total": 1, "entries": [docs["entries"][0]]}
    assert docs["entries"][0]["entry_id"] == population.ids[("sk-alice", "docs", "m")]
    two = (await client.admin("GET", "entries?limit=2")).body
    assert (two["total"], [e["entry_id"] for e in two["entries"]]) == (5, newest_first[:2])


async def test_the_listing_finds_entries_only_redis_still_holds(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    sections = admin_sections(redis={"url": redis_url})
    first = Client(session, await proxy_factory(**sections))
    entry_id = await first.stored("Which tiers does Deja have?")
    # A second proxy on the same Redis: its LRU-K tier is empty.
    second = Client(session, await proxy_factory(**sections))
    listing = (await second.admin("GET", "entries")).body
    assert [e["entry_id"] for e in listing["entries"]] == [entry_id]


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=ten", "tenant_key=sk-a"])
async def test_bad_listing_queries_get_400(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, query: str
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    reply = await client.admin("GET", f"entries?{query}")
    assert reply.status == 400 and reply.body["error"]["type"] == "invalid_request_error"
    assert (await client.admin("GET", "entries", token="wrong")).status == 401
