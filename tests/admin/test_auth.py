"""Who may use the admin API: nobody without a configured token, the admin with it, and a
client with its own API key for feedback on its own tenant's entries only."""

from __future__ import annotations

import aiohttp
import pytest

from tests.admin.conftest import TOKEN, Client, Reply, admin_sections
from tests.conftest import ProxyFactory

ROUTES = [
    ("POST", "feedback", {"entry_id": "x", "signal": "useful"}),
    ("GET", "entries/x", None),
    ("DELETE", "entries/x", None),
    ("POST", "invalidate", {"all": True}),
    ("GET", "stats", None),
    ("POST", "warmup", None),
    ("GET", "openapi.json", None),
]
ADMIN_ONLY = [r for r in ROUTES if r[1] != "feedback"]


def assert_auth_error(reply: Reply) -> None:
    assert reply.status == 401, reply.body
    assert reply.body["error"]["type"] == "authentication_error"
    assert set(reply.body["error"]) >= {"message", "type", "code"}


@pytest.mark.parametrize("method,path,payload", ROUTES)
async def test_without_a_configured_token_the_admin_api_does_not_exist(
    proxy_factory: ProxyFactory,
    session: aiohttp.ClientSession,
    method: str,
    path: str,
    payload: object,
) -> None:
    client = Client(session, await proxy_factory())
    for token in (None, TOKEN, "anything"):
        reply = await client.admin(method, path, payload, token=token)
        assert reply.status == 404, (method, path, reply.body)
        assert reply.body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("method,path,payload", ADMIN_ONLY)
async def test_admin_routes_need_the_right_token(
    proxy_factory: ProxyFactory,
    session: aiohttp.ClientSession,
    method: str,
    path: str,
    payload: object,
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    assert_auth_error(await client.admin(method, path, payload, token=None))
    assert_auth_error(await client.admin(method, path, payload, token="wrong-token"))
    assert_auth_error(await client.admin(method, path, payload, token=TOKEN + "x"))
    # The token is a bearer token: another scheme does not count.
    reply = await client.call(
        method, f"/admin/v1/{path}", payload, {"Authorization": f"Basic {TOKEN}"}
    )
    assert_auth_error(reply)


async def test_the_right_token_is_let_in(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    assert (await client.admin("GET", "stats")).status == 200
    assert (await client.admin("GET", "openapi.json")).status == 200
    assert (await client.admin("GET", "entries/nope")).status == 404
    assert (await client.admin("POST", "invalidate", {"all": True})).status == 200


async def test_feedback_needs_some_bearer_key(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    entry_id = await client.stored("What is the capital of France?", key="sk-alice")
    reply = await client.admin("POST", "feedback", {"entry_id": entry_id, "signal": 1}, None)
    assert_auth_error(reply)


async def test_a_client_key_gives_feedback_on_its_own_tenants_entries_only(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    alice = await client.stored("What is the capital of France?", key="sk-alice")
    bob = await client.stored("What is the capital of Spain?", key="sk-bob")
    anonymous = await client.stored("What is the capital of Italy?")

    own = await client.admin(
        "POST", "feedback", {"entry_id": alice, "signal": "useful"}, "sk-alice"
    )
    assert own.status == 200 and own.body["feedback"] == [1.2]
    # Another tenant's entry, or the anonymous tenant's, is not found (nothing is revealed).
    for entry_id in (bob, anonymous):
        theirs = await client.admin(
            "POST", "feedback", {"entry_id": entry_id, "signal": "irrelevant"}, "sk-alice"
        )
        assert theirs.status == 404, theirs.body
        assert (await client.wait_for_entry(entry_id))["feedback"] == []
    # A client key is no admin token.
    assert_auth_error(await client.admin("GET", f"entries/{alice}", token="sk-alice"))
    assert_auth_error(await client.admin("GET", "stats", token="sk-alice"))
    # The admin may give feedback on anyone's entry.
    admin = await client.admin("POST", "feedback", {"entry_id": bob, "signal": "useful"})
    assert admin.status == 200


async def test_a_request_id_of_another_tenant_is_refused(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await proxy_factory(**admin_sections()))
    reply = await client.ask("Who wrote Hamlet?", key="sk-bob", headers={"X-Request-Id": "rq-1"})
    await client.wait_for_entry(reply.headers["X-Deja-Entry"])
    body = {"request_id": "rq-1", "signal": "irrelevant"}
    assert (await client.admin("POST", "feedback", body, "sk-alice")).status == 404
    assert (await client.admin("POST", "feedback", body, "sk-bob")).status == 200


async def test_with_client_keys_configured_an_unknown_key_is_refused(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(
        session, await proxy_factory(**admin_sections(proxy={"api_keys": ["sk-alice"]}))
    )
    entry_id = await client.stored("What is the capital of France?", key="sk-alice")
    body = {"entry_id": entry_id, "signal": "useful"}
    assert (await client.admin("POST", "feedback", body, "sk-alice")).status == 200
    assert_auth_error(await client.admin("POST", "feedback", body, "sk-mallory"))
