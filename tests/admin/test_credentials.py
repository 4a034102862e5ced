"""Credentials → tenant (README, "Authentication"): every credential header form is a tenant of
its own, keys never share entries whatever header carries them, a request with no credential
never sees a keyed entry, `proxy.api_keys` reads every form, and in replacement mode no client
credential reaches the upstream. Through the real proxy, with the stub upstream (or a recorder
standing for one where what the upstream received is the point)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from openai import AsyncOpenAI

from tests.admin.conftest import CHAT, TOKEN, Client, Reply, admin_sections
from tests.conftest import ProxyFactory, RunningProxy
from tests.support.raw_http import raw_request
from tests.support.stub_upstream import StubUpstream

Headers = list[tuple[str, str]]
CUSTOM = "X-Goog-Api-Key"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# Each form: the headers that present `key` in it.
FORMS = {
    "bearer": lambda key: [("Authorization", f"Bearer {key}")],
    "other-scheme": lambda key: [("Authorization", f"Token {key}")],
    "bare-authorization": lambda key: [("Authorization", key)],
    "basic": lambda key: [("Authorization", basic("user", key))],
    "api-key": lambda key: [("api-key", key)],
    "x-api-key": lambda key: [("x-api-key", key)],
    "custom": lambda key: [(CUSTOM.lower(), key)],  # configured in another case than sent
}


def body(question: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}]}


async def send(
    proxy: RunningProxy, method: str, path: str, headers: Headers, payload: Any
) -> Reply:
    """A request carrying exactly `headers`, repeated names in any spelling included."""
    assert proxy.server.port is not None
    reply = await raw_request(proxy.server.host, proxy.server.port, method, path, headers, payload)
    return Reply(reply.status, reply.headers, reply.json())


async def ask(client: Client, question: str, headers: Headers) -> Reply:
    return await send(client.proxy, "POST", CHAT, headers, body(question))


async def cache_of(client: Client, question: str, headers: Headers) -> str:
    """Ask; on a miss, wait until its answer is stored (a repeat must not race the store)."""
    reply = await ask(client, question, headers)
    assert reply.status == 200, reply.body
    if reply.headers["X-Deja-Cache"] == "miss":
        await client.wait_for_entry(reply.headers["X-Deja-Entry"])
    return str(reply.headers["X-Deja-Cache"])


async def credential_proxy(proxy_factory: ProxyFactory, **more: dict[str, Any]) -> RunningProxy:
    """A proxy with the admin API and CUSTOM as a credential header (`more` overrides)."""
    proxy = {"credential_headers": [CUSTOM], **more.pop("proxy", {})}
    return await proxy_factory(**admin_sections(proxy=proxy, **more))


@pytest.mark.parametrize("form", sorted(FORMS))
async def test_each_form_keeps_two_keys_apart_and_a_keyless_request_out(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, stub: StubUpstream, form: str
) -> None:
    client = Client(session, await credential_proxy(proxy_factory))
    present = FORMS[form]
    question = "What is the capital of France?"
    assert await cache_of(client, question, present("sk-alice")) == "miss"
    assert await cache_of(client, question, present("sk-bob")) == "miss"  # another key
    assert await cache_of(client, question, present("sk-alice")) == "hit"  # the same key
    assert await cache_of(client, question, []) == "miss"  # no credential at all
    assert stub.completion_calls() == 3


async def test_a_keyless_request_never_sees_a_keyed_entry_nor_the_reverse(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await credential_proxy(proxy_factory))
    assert await cache_of(client, "Who wrote Hamlet?", [("api-key", "sk-a")]) == "miss"
    assert await cache_of(client, "Who wrote Hamlet?", []) == "miss"
    assert await cache_of(client, "Who painted the Mona Lisa?", []) == "miss"
    assert await cache_of(client, "Who painted the Mona Lisa?", [("x-api-key", "sk-a")]) == "miss"
    assert await cache_of(client, "Who painted the Mona Lisa?", []) == "hit"


async def test_the_same_key_in_another_header_is_another_tenant(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await credential_proxy(proxy_factory))
    for form in sorted(FORMS):
        assert await cache_of(client, "What is 2+2?", FORMS[form]("sk-same")) == "miss", form
    for form in sorted(FORMS):
        assert await cache_of(client, "What is 2+2?", FORMS[form]("sk-same")) == "hit", form


async def test_every_credential_header_carried_counts_and_none_wins(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await credential_proxy(proxy_factory))
    both = [("api-key", "sk-a"), ("X-Api-Key", "sk-b")]
    assert await cache_of(client, "Why is the sky blue?", both) == "miss"
    # Names are case-insensitive and the order does not matter: the same credentials.
    assert await cache_of(client, "Why is the sky blue?", [("x-api-key", "sk-b"), both[0]]) == "hit"
    for other in (
        [("api-key", "sk-a")],
        [("x-api-key", "sk-b")],
        [("api-key", "sk-a"), ("x-api-key", "sk-c")],
        [*both, ("Authorization", "Bearer sk-a")],
        [*both, ("api-key", "sk-a")],  # the same header twice is another request too
    ):
        assert await cache_of(client, "Why is the sky blue?", other) == "miss", other
    # A repeat in another spelling is the same repeat.
    again = [*both, ("API-KEY", "sk-a")]
    assert await cache_of(client, "Why is the sky blue?", again) == "hit"


async def test_an_unconfigured_header_is_no_credential(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    # Without proxy.credential_headers, X-Goog-Api-Key means nothing to the proxy: both
    # requests are the anonymous tenant's (the documented reason to configure it).
    client = Client(session, await proxy_factory(**admin_sections()))
    assert await cache_of(client, "What is a prime?", [(CUSTOM, "sk-a")]) == "miss"
    assert await cache_of(client, "What is a prime?", [(CUSTOM, "sk-b")]) == "hit"


# --- proxy.api_keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        [("Authorization", "Bearer sk-good")],
        [("Authorization", "bearer sk-good")],
        [("Authorization", "sk-good")],
        [("Authorization", basic("anyone", "sk-good"))],
        [("Authorization", basic("sk-good", ""))],
        [("api-key", "sk-good")],
        [("x-api-key", "sk-good")],
        [(CUSTOM, "sk-good")],
        [("Authorization", "Bearer sk-good"), ("api-key", "sk-good")],
    ],
)
async def test_api_keys_accept_a_known_key_in_every_form(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, headers: Headers
) -> None:
    client = Client(session, await credential_proxy(proxy_factory, proxy={"api_keys": ["sk-good"]}))
    assert (await ask(client, "Is this let in?", headers)).status == 200


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("Authorization", "Bearer sk-bad")],
        [("Authorization", "Token sk-good")],
        [("Authorization", basic("sk-good", "sk-bad"))],
        [("Authorization", "Basic not-base64!")],
        [("api-key", "sk-bad")],
        [("x-api-key", "")],
        [(CUSTOM, "sk-bad")],
        # A known key does not let in the unknown one beside it.
        [("Authorization", "Bearer sk-good"), ("api-key", "sk-bad")],
        [("api-key", "sk-good"), ("api-key", "sk-bad")],
    ],
)
async def test_api_keys_refuse_an_unknown_key_in_any_header(
    proxy_factory: ProxyFactory,
    session: aiohttp.ClientSession,
    stub: StubUpstream,
    headers: Headers,
) -> None:
    client = Client(session, await credential_proxy(proxy_factory, proxy={"api_keys": ["sk-good"]}))
    reply = await ask(client, "Is this let in?", headers)
    assert reply.status == 401, reply.body
    assert reply.body["error"]["type"] == "authentication_error"
    passed_through = await send(client.proxy, "GET", "/v1/models", headers, None)
    assert passed_through.status == 401, passed_through.body
    assert stub.completion_calls() == 0


# --- what the upstream receives ----------------------------------------------------------------


class Recorder:
    """An upstream that records every request's headers (repeated names included)."""

    def __init__(self) -> None:
        self.seen: list[Headers] = []
        self.server: TestServer | None = None

    async def answer(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen.append(list(request.headers.items()))
        message = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        completion = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m"}
        return web.json_response({**completion, "choices": [choice], "usage": usage})

    def credentials(self) -> list[Headers]:
        names = {"authorization", "api-key", "x-api-key", CUSTOM.lower(), "x-internal"}
        return [sorted((k.lower(), v) for k, v in seen if k.lower() in names) for seen in self.seen]


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.answer)
    recorder.server = TestServer(app, host="127.0.0.1", port=0)
    await recorder.server.start_server()
    yield recorder
    await recorder.server.close()


CLIENT_CREDENTIALS = [
    ("Authorization", "Bearer sk-client"),
    ("api-key", "sk-client"),
    ("x-api-key", "sk-client"),
    ("X-Internal", "sk-client"),
    ("API-KEY", "sk-client"),  # repeated, in another spelling
    ("authorization", "Bearer sk-client"),
]


async def through(proxy: RunningProxy) -> list[int]:
    """The client's credentials on a cached route, then on a pass-through route."""
    chat = await send(proxy, "POST", CHAT, CLIENT_CREDENTIALS, body("Hi"))
    models = await send(proxy, "GET", "/v1/models", CLIENT_CREDENTIALS, None)
    return [chat.status, models.status]


async def test_without_an_upstream_key_the_credentials_go_upstream_unchanged(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, recorder: Recorder
) -> None:
    assert recorder.server is not None
    proxy = await proxy_factory(
        upstream={"url": str(recorder.server.make_url("/v1"))},
        proxy={"credential_headers": ["x-internal"]},
    )
    assert await through(proxy) == [200, 200]
    sent = sorted((k.lower(), v) for k, v in CLIENT_CREDENTIALS)
    assert recorder.credentials() == [sent, sent]


async def test_replacement_mode_sends_only_the_proxys_key_upstream(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, recorder: Recorder
) -> None:
    assert recorder.server is not None
    proxy = await proxy_factory(
        upstream={"url": str(recorder.server.make_url("/v1")), "api_key": "sk-upstream"},
        proxy={"api_keys": ["sk-client"], "credential_headers": ["x-internal"]},
    )
    assert await through(proxy) == [200, 200]
    only_ours = [("authorization", "Bearer sk-upstream")]
    assert recorder.credentials() == [only_ours, only_ours]


# --- admin: feedback with the client's key, warm-up, invalidate --------------------------------


async def feedback(client: Client, entry_id: str, headers: Headers) -> Reply:
    payload = {"entry_id": entry_id, "signal": "useful"}
    return await send(client.proxy, "POST", "/admin/v1/feedback", headers, payload)


async def test_feedback_with_the_clients_own_key_in_api_key_form(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await credential_proxy(proxy_factory))
    miss = await ask(client, "What is the capital of Peru?", [("api-key", "sk-alice")])
    entry_id = miss.headers["X-Deja-Entry"]
    await client.wait_for_entry(entry_id)
    assert (await feedback(client, entry_id, [("api-key", "sk-alice")])).status == 200
    # Another key, or the same key in another header, is another tenant: not found.
    for other in ([("api-key", "sk-bob")], [("Authorization", "Bearer sk-alice")]):
        assert (await feedback(client, entry_id, other)).status == 404, other
    refused = await feedback(client, entry_id, [])
    assert refused.status == 401 and refused.body["error"]["type"] == "authentication_error"


async def test_feedback_checks_every_form_against_api_keys(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(
        session, await credential_proxy(proxy_factory, proxy={"api_keys": ["sk-alice"]})
    )
    miss = await ask(client, "What is the capital of Chile?", [("x-api-key", "sk-alice")])
    entry_id = miss.headers["X-Deja-Entry"]
    await client.wait_for_entry(entry_id)
    assert (await feedback(client, entry_id, [("x-api-key", "sk-alice")])).status == 200
    assert (await feedback(client, entry_id, [("x-api-key", "sk-mallory")])).status == 401
    mixed = [("x-api-key", "sk-alice"), ("api-key", "sk-mallory")]
    assert (await feedback(client, entry_id, mixed)).status == 401


def warm_line(question: str, **credentials: Any) -> bytes:
    answer = {"role": "assistant", "content": f"Warm answer to {question}"}
    response = {
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": answer, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8},
    }
    return orjson.dumps({"request": body(question), "response": response, **credentials})


async def warm(client: Client, lines: list[bytes]) -> list[dict[str, Any]]:
    url = client.proxy.url("/admin/v1/warmup")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with client.session.post(url, data=b"\n".join(lines), headers=headers) as response:
        assert response.status == 200
        return [orjson.loads(raw) async for raw in response.content if raw.strip()]


async def test_warm_up_lines_name_their_tenant_by_bare_key_or_by_headers(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, stub: StubUpstream
) -> None:
    client = Client(session, await credential_proxy(proxy_factory))
    results = await warm(
        client,
        [
            warm_line("Bare key?", api_key="sk-w"),
            warm_line("Azure key?", headers={"Api-Key": "sk-az"}),
            warm_line("Two headers?", headers={"api-key": "sk-1", CUSTOM: "sk-2"}),
            warm_line("Not a credential?", headers={"X-Other": "sk-w"}),
            warm_line("Both?", api_key="sk-w", headers={"api-key": "sk-w"}),
            warm_line("Empty?", headers={}),
            warm_line("Not a string?", headers={"api-key": 3}),
        ],
    )
    assert [("entry_id" in r, "error" in r) for r in results[:-1]] == [(True, False)] * 3 + [
        (False, True)
    ] * 4
    assert "X-Other" in results[3]["error"] and "not a credential header" in results[3]["error"]
    # A bare key stands for `Authorization: Bearer <key>`, as the OpenAI SDKs send it.
    assert await cache_of(client, "Bare key?", [("Authorization", "Bearer sk-w")]) == "hit"
    assert await cache_of(client, "Azure key?", [("api-key", "sk-az")]) == "hit"
    assert await cache_of(client, "Two headers?", [(CUSTOM, "sk-2"), ("API-KEY", "sk-1")]) == "hit"
    assert stub.completion_calls() == 0
    for question, headers in (
        ("Bare key?", [("api-key", "sk-w")]),
        ("Bare key?", []),
        ("Azure key?", [("Authorization", "Bearer sk-az")]),
        ("Two headers?", [("api-key", "sk-1")]),
    ):
        assert await cache_of(client, question, headers) == "miss", (question, headers)


async def invalidate(client: Client, selector: dict[str, Any]) -> Reply:
    return await client.admin("POST", "invalidate", selector)


async def test_invalidate_names_a_tenant_by_bare_key_or_by_headers(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    client = Client(session, await credential_proxy(proxy_factory))
    bearer, azure = [("Authorization", "Bearer sk-k")], [("api-key", "sk-k")]
    for headers in (bearer, azure):
        assert await cache_of(client, "What is DNS?", headers) == "miss"
    assert (await invalidate(client, {"tenant_key": "sk-k"})).body == {"invalidated": 1}
    assert await cache_of(client, "What is DNS?", azure) == "hit"  # another tenant's
    assert await cache_of(client, "What is DNS?", bearer) == "miss"
    reply = await invalidate(client, {"tenant_headers": {"API-KEY": "sk-k"}})
    assert reply.body == {"invalidated": 1}
    assert await cache_of(client, "What is DNS?", bearer) == "hit"
    assert await cache_of(client, "What is DNS?", azure) == "miss"
    for bad in (
        {"tenant_headers": {"x-other": "sk-k"}},
        {"tenant_headers": {}},
        {"tenant_headers": ["api-key"]},
        {"tenant_headers": {"api-key": "sk-k"}, "tenant_key": "sk-k"},
        {"tenant_headers": {"api-key": "sk-k"}, "tenant": "anonymous"},
    ):
        refused = await invalidate(client, bad)
        assert refused.status == 400, bad
        assert refused.body["error"]["type"] == "invalid_request_error"


async def test_the_official_client_with_a_key_header_beside_its_bearer(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, stub: StubUpstream
) -> None:
    # An Azure-style deployment: the SDK's own Bearer is a placeholder shared by every client,
    # and the key that tells them apart travels in api-key.
    client = Client(session, await credential_proxy(proxy_factory))
    messages: list[Any] = [{"role": "user", "content": "What is the capital of Kenya?"}]

    async def cache_by_sdk(key: str) -> str:
        async with AsyncOpenAI(
            base_url=client.proxy.base_url,
            api_key="placeholder",
            default_headers={"api-key": key},
            max_retries=0,
        ) as sdk:
            raw = await sdk.chat.completions.with_raw_response.create(model="m", messages=messages)
        if raw.headers["X-Deja-Cache"] == "miss":
            await client.wait_for_entry(raw.headers["X-Deja-Entry"])
        return str(raw.headers["X-Deja-Cache"])

    assert [await cache_by_sdk(k) for k in ("sk-a", "sk-b", "sk-a", "sk-b")] == [
        "miss",
        "miss",
        "hit",
        "hit",
    ]
    assert stub.completion_calls() == 2
