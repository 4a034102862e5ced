"""What the dashboard reads: /admin/v1/series and /admin/v1/misses, and the page itself."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.admin.conftest import Client, admin_sections
from tests.conftest import ProxyFactory

FAST = {"series_interval_s": 0.1}


async def _series_until(client: Client, done: Any, timeout_s: float = 5.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        series = (await client.admin("GET", "series")).body
        if done(series):
            return dict(series)
        assert asyncio.get_running_loop().time() < deadline, series
        await asyncio.sleep(0.05)


async def test_the_series_counts_what_the_proxy_served_interval_by_interval(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections(admin=FAST)))
    await client.stored("What is a semantic cache?")
    for _ in range(3):
        assert (await client.ask("What is a semantic cache?")).headers["X-Deja-Cache"] == "hit"

    def counted(series: dict[str, Any]) -> bool:
        return sum(p["hits"] for p in series["points"]) == 3

    series = await _series_until(client, counted)
    points = series["points"]
    assert series["interval_s"] == 0.1 and series["window_s"] == 3600.0
    assert sum(p["misses"] for p in points) == 1
    assert [p["at_s"] for p in points] == sorted(p["at_s"] for p in points)
    busy = [p for p in points if p["hits"]]
    assert all(set(p["hit_rate_by_kind"]) == {"lru_k/exact"} for p in busy)
    stats = (await client.admin("GET", "stats")).body
    assert sum(p["usd_saved"] for p in points) == pytest.approx(stats["saved"]["usd"])
    assert (
        sum(p["completion_tokens_saved"] for p in points) == (stats["saved"]["completion_tokens"])
    )
    # Latencies arrive with the request ledger's drain; within a few intervals they are in.
    latency = await _series_until(
        client, lambda s: sum(p["latency_s"].get("hit", {}).get("count", 0) for p in s["points"])
    )
    hit_counts = [p["latency_s"]["hit"]["count"] for p in latency["points"] if p["latency_s"]]
    assert sum(hit_counts) == 3
    last = latency["points"][-1]["state"]
    assert last["breaker_state"] == "closed" and last["redis_up"] is None
    assert last["global_threshold"] == stats["false_hits"]["global_threshold"]


async def test_recent_misses_say_why_newest_first_without_any_text(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    first = await client.ask("Tell me about the private project Nightingale", key="sk-alice")
    second = await client.ask("Explain caching", headers={"X-Deja-Namespace": "docs"})
    assert "X-Deja-Explain" not in first.headers  # only for a client that asks
    misses = (await client.admin("GET", "misses")).body["misses"]
    assert [m["request_id"] for m in misses] == [
        second.headers["X-Request-Id"],
        first.headers["X-Request-Id"],
    ]
    assert (misses[0]["namespace"], misses[0]["route"], misses[0]["model"]) == ("docs", "chat", "m")
    # Semantic matching is off here: no candidate was compared, and the reason says so.
    assert misses[0]["refused"] == "semantic_off" and misses[0]["similarity"] is None
    assert "Nightingale" not in str(misses)


async def test_the_dashboard_loads_without_the_token_but_its_data_does_not(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    page = await client.call("GET", "/admin/")
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert 'id="login-form" method="post"' in page.body
    script = await client.call("GET", "/admin/app.js")
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert "sessionStorage" in script.body and "Authorization" in script.body
    moved = await session.get(client.proxy.url("/admin"), allow_redirects=False)
    async with moved:
        assert (moved.status, moved.headers["Location"]) == (308, "/admin/")
    for path in ("series", "misses", "stats", "entries"):
        assert (await client.admin("GET", path, token=None)).status == 401
        assert (await client.admin("GET", path, token="wrong")).status == 401
        assert (await client.admin("GET", path)).status == 200


async def test_without_an_admin_token_there_is_no_dashboard(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory())
    assert (await client.call("GET", "/admin/")).status == 404
    assert (await client.call("GET", "/admin/app.js")).status == 404


@pytest.mark.redis
async def test_prompts_are_kept_and_listed_only_with_store_prompts(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    kept = admin_sections(admin={"store_prompts": True}, redis={"url": redis_url})
    client = Client(session, await proxy_factory(**kept))
    entry_id = await client.stored("Which tiers does Deja have?")
    assert (await client.admin("GET", f"entries/{entry_id}")).body["prompt"] == (
        "Which tiers does Deja have?"
    )
    # Read back from Redis by a replica whose LRU-K tier is empty.
    replica = Client(session, await proxy_factory(**kept))
    (listed,) = (await replica.admin("GET", "entries")).body["entries"]
    assert (listed["entry_id"], listed["prompt"]) == (entry_id, "Which tiers does Deja have?")

    off = Client(session, await proxy_factory(**admin_sections(redis={"url": redis_url})))
    other = await off.stored("What is a lemma key?")
    assert "prompt" not in (await off.admin("GET", f"entries/{other}")).body
    listing = (await off.admin("GET", "entries")).body["entries"]
    assert [("prompt" in e) for e in listing] == [False, True]  # newest first
