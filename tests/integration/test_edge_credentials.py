"""Edge mode keeps the tenant of every credential form: the worker stores an answer for the
tenant of the credentials it was relayed, and the front must find it for the same credentials
(and only for them) once the worker is gone. The front and the worker run in this process
(create_edge_app and create_app, the worker on a unix socket), with a real Redis between them
and the stub upstream behind; tests/integration/test_edge_mode.py runs the real processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from proxy.composition.app import create_app, create_edge_app
from proxy.edge.worker_link import UnixRoute, WorkerLink
from tests.conftest import make_config
from tests.support.raw_http import RawReply, raw_request
from tests.support.stub_upstream import StubUpstream
from tests.support.unix_server import UnixServer

pytestmark = pytest.mark.redis

TOKEN = "edge-admin"
Headers = list[tuple[str, str]]
FORMS: list[Headers] = [
    [("Authorization", "Bearer sk-e")],
    [("Authorization", "Basic dXNlcjpzay1l")],
    [("api-key", "sk-e")],
    [("X-Api-Key", "sk-e")],
    [("X-Goog-Api-Key", "sk-e")],
    [("api-key", "sk-e"), ("API-KEY", "sk-f"), ("x-api-key", "sk-e")],
]


class Edge:
    def __init__(self, tmp: Path, stub: StubUpstream, redis_url: str) -> None:
        config = make_config(
            {
                "server": {"edge": True, "access_log": False},
                "redis": {"url": redis_url},
                "upstream": {"url": stub.base_url, "request_logprobs": False},
                "semantic": {"enabled": False},
                "admin": {"token": TOKEN},
                "proxy": {"credential_headers": ["x-goog-api-key"]},
            }
        )
        socket_path = str(tmp / "worker.sock")
        self.worker = UnixServer(create_app(config, edge_worker=True), socket_path)
        self.front = TestServer(create_edge_app(config, WorkerLink(UnixRoute(socket_path)), None))

    async def ask(self, headers: Headers) -> RawReply:
        """Exactly `headers` (aiohttp's client would merge a repeat spelled otherwise)."""
        assert self.front.port is not None
        payload = {"model": "m", "messages": [{"role": "user", "content": "Who is it?"}]}
        return await raw_request(
            self.front.host, self.front.port, "POST", "/v1/chat/completions", headers, payload
        )

    async def wait_stored(self, session: aiohttp.ClientSession, entry_id: str) -> None:
        url = self.front.make_url(f"/admin/v1/entries/{entry_id}")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        deadline = asyncio.get_running_loop().time() + 10.0
        while True:
            async with session.get(url, headers=headers) as response:
                if response.status == 200:
                    return
            assert asyncio.get_running_loop().time() < deadline, f"{entry_id} was never stored"
            await asyncio.sleep(0.05)


@pytest.fixture
async def edge(tmp_path: Path, stub: StubUpstream, redis_url: str) -> AsyncIterator[Edge]:
    edge = Edge(tmp_path, stub, redis_url)
    await edge.worker.start()
    await edge.front.start_server()
    yield edge
    await edge.front.close()
    await edge.worker.close()


async def test_the_front_finds_what_the_worker_stored_for_the_same_credentials_only(
    edge: Edge, stub: StubUpstream
) -> None:
    async with aiohttp.ClientSession() as session:
        for headers in FORMS:
            miss = await edge.ask(headers)
            assert (miss.status, miss.headers["X-Deja-Cache"]) == (200, "miss"), headers
            await edge.wait_stored(session, miss.headers["X-Deja-Entry"])
    assert stub.completion_calls() == len(FORMS)  # each form a tenant of its own
    await edge.worker.close()  # from here on, only the front can answer
    for headers in FORMS:
        hit = await edge.ask(headers)
        assert (hit.status, hit.headers.get("X-Deja-Cache")) == (200, "hit"), (headers, hit)
    # Without a credential: no tenant's entry, so relayed to the worker, which is gone.
    assert (await edge.ask([])).status == 503
