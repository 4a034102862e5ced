"""GET / DELETE /admin/v1/entries/{id} and POST /admin/v1/invalidate (LRU-K and Redis)."""

from __future__ import annotations

from typing import Any, ClassVar

import aiohttp
import pytest
import redis

from tests.admin.conftest import Client, admin_sections
from tests.conftest import ProxyFactory
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis


def redis_entries(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return len(client.keys("deja:v1:*:e:*"))


async def test_an_entry_is_described_and_deleted_everywhere(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    client = Client(session, await proxy_factory(**admin_sections(redis={"url": redis_url})))
    entry_id = await client.stored(
        "What is the capital of France?", key="sk-alice", headers={"X-Deja-Namespace": "geo"}
    )
    entry = await client.wait_for_entry(entry_id)
    assert entry["entry_id"] == entry_id
    assert (entry["route"], entry["namespace"], entry["model"]) == ("chat", "geo", "m")
    assert (entry["ttl_s"], entry["fresh"], entry["feedback"]) == (300.0, True, [])
    assert (entry["confidence"], entry["certainty"]) == (1.0, 1.0)
    assert entry["expires_at"] == pytest.approx(entry["stored_at"] + 300.0)
    assert entry["grace_ends_at"] == pytest.approx(entry["stored_at"] + 300.0 + 3600.0)
    assert entry["tenant"] not in ("", "anonymous", "sk-alice")  # the keyed hash
    message = entry["completion"]["choices"][0]["message"]
    assert message["content"] == "Answer to: What is the capital of France?"
    # The description may come from LRU-K before the Redis write has landed.
    await wait_until(lambda: redis_entries(redis_url) == 1)

    deleted = await client.admin("DELETE", f"entries/{entry_id}")
    assert (deleted.status, deleted.body) == (200, {"entry_id": entry_id, "deleted": True})
    assert redis_entries(redis_url) == 0
    assert (await client.admin("GET", f"entries/{entry_id}")).status == 404
    assert (await client.admin("DELETE", f"entries/{entry_id}")).status == 404
    again = await client.ask(
        "What is the capital of France?", key="sk-alice", headers={"X-Deja-Namespace": "geo"}
    )
    assert again.headers["X-Deja-Cache"] == "miss"


class Population:
    """Five entries: (key, namespace, model) → entry id."""

    ROWS: ClassVar[list[tuple[str | None, str, str]]] = [
        ("sk-alice", "", "m"),
        ("sk-alice", "docs", "m"),
        ("sk-bob", "", "m"),
        ("sk-bob", "", "other"),
        (None, "", "m"),
    ]

    def __init__(self, client: Client) -> None:
        self.client = client
        self.ids: dict[tuple[str | None, str, str], str] = {}

    async def store(self) -> None:
        for key, namespace, model in self.ROWS:
            self.ids[(key, namespace, model)] = await self.client.stored(
                "Which tiers does Deja have?", **self._kwargs(key, namespace, model)
            )

    async def cached(self) -> list[tuple[str | None, str, str]]:
        """The rows that are still hits."""
        out = []
        for key, namespace, model in self.ROWS:
            reply = await self.client.ask(
                "Which tiers does Deja have?", **self._kwargs(key, namespace, model)
            )
            if reply.headers["X-Deja-Cache"] == "hit":
                out.append((key, namespace, model))
        return out

    @staticmethod
    def _kwargs(key: str | None, namespace: str, model: str) -> dict[str, Any]:
        headers = {"X-Deja-Namespace": namespace} if namespace else {}
        return {"key": key, "headers": headers, "model": model}


@pytest.mark.parametrize(
    "selector,count,left",
    [
        ({"tenant_key": "sk-alice"}, 2, [2, 3, 4]),
        ({"tenant_key": "sk-alice", "namespace": "docs"}, 1, [0, 2, 3, 4]),
        ({"namespace": "docs"}, 1, [0, 2, 3, 4]),
        ({"model": "other"}, 1, [0, 1, 2, 4]),
        ({"tenant_key": "sk-bob", "model": "m"}, 1, [0, 1, 3, 4]),
        ({"tenant": "anonymous"}, 1, [0, 1, 2, 3]),
        ({"all": True}, 5, []),
    ],
)
async def test_invalidation_by_selector(
    proxy_factory: ProxyFactory,
    session: aiohttp.ClientSession,
    redis_url: str,
    selector: dict[str, Any],
    count: int,
    left: list[int],
) -> None:
    client = Client(session, await proxy_factory(**admin_sections(redis={"url": redis_url})))
    population = Population(client)
    await population.store()
    assert redis_entries(redis_url) == 5
    reply = await client.admin("POST", "invalidate", selector)
    assert (reply.status, reply.body) == (200, {"invalidated": count})
    assert redis_entries(redis_url) == 5 - count
    assert await population.cached() == [Population.ROWS[i] for i in left]


async def test_invalidation_by_tenant_hash_as_the_entry_shows_it(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    client = Client(session, await proxy_factory(**admin_sections(redis={"url": redis_url})))
    population = Population(client)
    await population.store()
    bob = await client.wait_for_entry(population.ids[("sk-bob", "", "m")])
    reply = await client.admin("POST", "invalidate", {"tenant": bob["tenant"]})
    assert reply.body == {"invalidated": 2}
    assert await population.cached() == [Population.ROWS[i] for i in (0, 1, 4)]


@pytest.mark.parametrize(
    "selector",
    [
        {},
        {"all": False},
        {"all": True, "model": "m"},
        {"tenant_key": "sk-a", "tenant": "abc"},
        {"model": 3},
        {"namespace": None},
        {"tenant_key": ["sk-a"]},
    ],
)
async def test_bad_selectors_get_400(
    proxy_factory: ProxyFactory,
    session: aiohttp.ClientSession,
    redis_url: str,
    selector: dict[str, Any],
) -> None:
    client = Client(session, await proxy_factory(**admin_sections(redis={"url": redis_url})))
    entry_id = await client.stored("Which tiers does Deja have?")
    reply = await client.admin("POST", "invalidate", selector)
    assert reply.status == 400, reply.body
    assert reply.body["error"]["type"] == "invalid_request_error"
    await client.wait_for_entry(entry_id)  # nothing went
