"""`deja stats`, `entries`, `invalidate`, `feedback` and `--version` against a running proxy."""

from __future__ import annotations

import json
from importlib import metadata

import aiohttp
import pytest

from tests.admin.conftest import Client, admin_sections
from tests.admin.test_entries_invalidate import Population
from tests.cli.conftest import admin_env, deja
from tests.conftest import ProxyFactory, RunningProxy

pytestmark = pytest.mark.redis


async def proxy_with_redis(factory: ProxyFactory, redis_url: str) -> RunningProxy:
    return await factory(**admin_sections(redis={"url": redis_url}))


async def test_version_names_the_installed_distribution() -> None:
    run = await deja("--version")
    assert (run.rc, run.out, run.err) == (0, f"deja {metadata.version('deja')}\n", "")


async def test_stats_for_people_and_for_machines(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    proxy = await proxy_with_redis(proxy_factory, redis_url)
    client = Client(session, proxy)
    await client.stored("What is 2+2?")
    assert (await client.ask("What is 2+2?")).headers["X-Deja-Cache"] == "hit"
    env = admin_env(proxy.url("/"))

    text = await deja("stats", env=env)
    assert (text.rc, text.err) == (0, "")
    lines = {line.split("  ")[0]: line for line in text.out.splitlines()}
    assert lines["Requests"].endswith("1 hits, 1 misses, 0 bypasses; hit rate 50.0%")
    assert lines["Hits by tier"].endswith("lru_k (exact 1)")
    assert lines["Redis"].endswith("available")
    assert lines["Upstream breaker"].endswith("closed (0 trips)")
    assert "False hits (semantic)" in lines

    machine = await deja("stats", "--json", env=env)
    assert machine.rc == 0
    stats = json.loads(machine.out)
    assert stats["requests"] == {"hits": 1, "misses": 1, "bypasses": 0, "hit_rate": 0.5}
    assert stats == (await client.admin("GET", "stats")).body | {"requests": stats["requests"]}


async def test_entries_list_show_and_delete(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    proxy = await proxy_with_redis(proxy_factory, redis_url)
    client = Client(session, proxy)
    population = Population(client)
    await population.store()
    env = admin_env(proxy.url("/v1"))  # the OpenAI base URL works as well
    newest_first = [population.ids[row] for row in reversed(Population.ROWS)]

    listing = await deja("entries", "list", env=env)
    assert listing.rc == 0, listing.err
    header, *rows, footer = listing.out.splitlines()
    assert header.split() == [
        "ENTRY", "MODEL", "NAMESPACE", "TENANT", "AGE", "TTL", "FRESH", "FEEDBACK", "ANSWER"
    ]  # fmt: skip
    assert [row.split()[0] for row in rows] == newest_first
    assert rows[0].endswith("Answer to: Which tiers does Deja have?")
    assert footer == "5 of 5 entries, newest first"
    other = await deja("entries", "list", "--model", "other", "--limit", "1", env=env)
    assert other.out.splitlines()[1].split()[0] == population.ids[("sk-bob", "", "other")]
    assert other.out.splitlines()[-1] == "1 of 1 entries, newest first"
    machine = json.loads((await deja("entries", "list", "--json", "--limit", "2", env=env)).out)
    assert machine["total"] == 5
    assert [e["entry_id"] for e in machine["entries"]] == newest_first[:2]
    none = await deja("entries", "list", "--namespace", "nowhere", env=env)
    assert (none.rc, none.out) == (0, "no entries match\n")
    unnamed = json.loads((await deja("entries", "list", "--namespace", "", "--json", env=env)).out)
    assert unnamed["total"] == 4  # the empty namespace is a namespace: all but "docs"

    entry_id = population.ids[("sk-alice", "docs", "m")]
    shown = await deja("entries", "show", entry_id, env=env)
    assert shown.rc == 0, shown.err
    fields = dict(line.split(None, 1) for line in shown.out.split("\n\n")[0].splitlines())
    assert (fields["Entry"], fields["Namespace"], fields["Model"]) == (entry_id, "docs", "m")
    assert fields["Fresh"].startswith("yes, for ") and fields["Fresh"].endswith("(TTL 5m 00s)")
    assert shown.out.endswith(
        "Answer 0 (finish_reason stop):\nAnswer to: Which tiers does Deja have?\n"
    )
    described = json.loads((await deja("entries", "show", entry_id, "--json", env=env)).out)
    assert described == (await client.admin("GET", f"entries/{entry_id}")).body | {
        "age_s": described["age_s"]
    }

    deleted = await deja("entries", "delete", entry_id, env=env)
    assert (deleted.rc, deleted.out) == (0, f"deleted {entry_id} from every tier and replica\n")
    gone = await deja("entries", "show", entry_id, env=env)
    assert (gone.rc, gone.out) == (1, "")
    assert gone.error_line == f"deja: no entry '{entry_id}' (404)"


async def test_invalidate_asks_first_unless_told_yes(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    proxy = await proxy_with_redis(proxy_factory, redis_url)
    client = Client(session, proxy)
    population = Population(client)
    await population.store()
    env = admin_env(proxy.url("/"))

    # No answer (end of input) and a "no" are refusals: nothing goes.
    for answer in (b"", b"n\n"):
        refused = await deja("invalidate", "--tenant-key", "sk-alice", env=env, stdin=answer)
        assert (refused.rc, refused.out) == (1, "")
        question, refusal = refused.err.splitlines()
        assert question == (
            f"Delete every entry of the tenant of key … from {proxy.url('/')},"
            " in Redis and every replica? [y/N] "
        )
        assert refusal == "deja: not confirmed: nothing was invalidated (--yes skips the question)"
        assert await stored_ids(client) == set(population.ids.values())

    # Named by anything but a key, the question says how many entries match now.
    asked = await deja("invalidate", "--model", "other", "--namespace", "", env=env)
    assert asked.err.splitlines()[0] == (
        f"Delete every entry in namespace '', of model 'other' (1 now) from {proxy.url('/')},"
        " in Redis and every replica? [y/N] "
    )
    everything_asked = await deja("invalidate", "--all", env=env, stdin=b"no\n")
    assert "Delete EVERY cached entry (5 now)" in everything_asked.err

    consented = await deja("invalidate", "--tenant-key", "sk-alice", env=env, stdin=b"y\n")
    assert (consented.rc, consented.out) == (0, "invalidated 2 entries\n")
    assert await stored_ids(client) == {population.ids[row] for row in Population.ROWS[2:]}

    by_model = await deja("invalidate", "--model", "other", "--yes", "--json", env=env)
    assert (by_model.rc, json.loads(by_model.out), by_model.err) == (0, {"invalidated": 1}, "")
    everything = await deja("invalidate", "--all", "-y", env=env)
    assert (everything.rc, everything.out) == (0, "invalidated 2 entries\n")
    assert await stored_ids(client) == set()
    assert await population.cached() == []


async def stored_ids(client: Client) -> set[str]:
    return {e["entry_id"] for e in (await client.admin("GET", "entries")).body["entries"]}


@pytest.mark.parametrize(
    "args",
    [["invalidate", "--yes"], ["invalidate", "--all", "--model", "m", "--yes"]],
)
async def test_invalidate_needs_a_selector_or_all_alone(
    proxy_factory: ProxyFactory, redis_url: str, args: list[str]
) -> None:
    proxy = await proxy_with_redis(proxy_factory, redis_url)
    run = await deja(*args, env=admin_env(proxy.url("/")))
    assert run.rc == 1
    assert run.error_line == (
        "deja: name what to invalidate (--tenant-key, --tenant, --namespace, --model),"
        " or --all alone"
    )


async def test_feedback_by_entry_and_by_request_with_a_client_key(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, redis_url: str
) -> None:
    proxy = await proxy_with_redis(proxy_factory, redis_url)
    client = Client(session, proxy)
    entry_id = await client.stored("What is 2+2?", key="sk-alice")
    env = admin_env(proxy.url("/"))

    first = await deja("feedback", "--entry", entry_id, "irrelevant", env=env)
    assert first.rc == 0, first.err
    assert first.out.startswith(f"{entry_id}: feedback sum -0.8; TTL now ")
    assert (await client.wait_for_entry(entry_id))["feedback"] == [-0.8]

    # A client reports on the hit it was served, with its own key and no admin token.
    hit = await client.ask("What is 2+2?", key="sk-alice")
    request_id = hit.headers["X-Request-Id"]
    no_token = admin_env(proxy.url("/"), token="")
    useful = await deja(
        "feedback", "--request", request_id, "useful", "--api-key", "sk-alice", "--json",
        env=no_token,
    )  # fmt: skip
    assert useful.rc == 0, useful.err
    assert json.loads(useful.out)["feedback"] == [-0.8, 1.2]

    # Two irrelevant signals (a sum of -1.6) evict an entry everywhere.
    other = await client.stored("What is 3+3?")
    await deja("feedback", "--entry", other, "irrelevant", env=env)
    evicting = await deja("feedback", "--entry", other, "irrelevant", env=env)
    assert (evicting.rc, evicting.out) == (0, f"{other}: evicted (feedback sum -1.6)\n")
    assert (await client.admin("GET", f"entries/{other}")).status == 404

    bad = await deja("feedback", "--entry", entry_id, "maybe", env=env)
    assert bad.rc == 2
    assert bad.error_line.startswith("deja feedback: argument SIGNAL: 'maybe' is not useful")
