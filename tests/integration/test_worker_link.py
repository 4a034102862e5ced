"""Relaying to edge mode's worker: a real front (request frame + WorkerLink) in front of a small
aiohttp app on a unix socket standing for the worker (the seam; the real one is exercised end
to end in tests/integration/test_edge_mode.py). The answer comes back as the worker gave it,
streams chunk by chunk; the request reaches the worker as the client sent it, with the front's
request id; a worker that is not there is a 503 error object."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from proxy.edge.worker_link import UnixRoute, WorkerLink
from proxy.http.access_log import NoAccessLog
from proxy.http.finished_requests import RequestLedger
from proxy.http.frame import RequestFrame
from proxy.http.request_context import CONTEXT, RequestContext
from tests.support.unix_server import UnixServer


class Observed:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        self.calls.append((route, status))


class Worker:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.seen: list[tuple[str, str, CIMultiDict[str], bytes]] = []
        self._server: UnixServer | None = None

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((request.method, request.path_qs, request.headers.copy(), body))
        if request.path == "/stream":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for i in range(3):
                await response.write(f"data: {i}\n\n".encode())
                await asyncio.sleep(0.01)
            await response.write_eof()
            return response
        return web.json_response(
            {"echo": body.decode()}, status=201, headers={"X-Deja-Cache": "miss"}
        )

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.answer)
        self._server = UnixServer(app, self.socket_path)
        await self._server.start()

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()


class Front:
    """The front: a request frame whose only route relays, its requests observed."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.link = WorkerLink(UnixRoute(socket_path))
        self.observed = Observed()
        self.ledger = RequestLedger(self.observed, NoAccessLog(), interval_s=60)
        app = web.Application()
        frame = RequestFrame(app, self)
        frame.route("/{tail:.*}", "relayed", self.relay)
        self.server = TestServer(app)

    def record(self, method: str, ctx: RequestContext, status: int, elapsed_s: float) -> None:
        if not ctx.relayed:  # as edge mode's front records: what the worker answered is its
            self.ledger.record(method, ctx, status, elapsed_s)

    async def relay(self, request: web.Request) -> web.StreamResponse:
        return await self.link.forward(request, request[CONTEXT], await request.read(), {})


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[Front]:
    front = Front(str(tmp_path / "worker.sock"))
    await front.link.start()
    await front.server.start_server()
    yield front
    await front.server.close()
    await front.link.close()


async def test_an_answer_comes_back_as_the_worker_gave_it(front: Front) -> None:
    server = front.server
    worker = Worker(front.socket_path)
    await worker.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(
                server.make_url("/v1/x?a=1"),
                data=b"payload",
                headers={"Authorization": "Bearer sk-1", "X-Request-Id": "client-id"},
            ) as r:
                assert r.status == 201
                assert r.headers["X-Deja-Cache"] == "miss"
                assert r.headers["X-Request-Id"] == "client-id"
                assert await r.json() == {"echo": "payload"}
            async with s.get(server.make_url("/stream")) as r:
                assert r.headers["Content-Type"] == "text/event-stream"
                chunks = [chunk async for chunk in r.content.iter_any()]
                assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    finally:
        await worker.close()
    method, path, headers, body = worker.seen[0]
    assert (method, path, body) == ("POST", "/v1/x?a=1", b"payload")
    assert headers["Authorization"] == "Bearer sk-1"
    assert headers["X-Request-Id"] == "client-id"  # the front's id for the request: the client's
    front.ledger.drain()
    assert front.observed.calls == []  # the worker answered both, and counts them


async def test_no_worker_is_a_503_error_object_counted_by_the_front(front: Front) -> None:
    async with aiohttp.ClientSession() as s, s.get(front.server.make_url("/anything")) as r:
        assert r.status == 503
        error = (await r.json())["error"]
        assert (error["type"], error["code"]) == ("server_error", "worker_unavailable")
    front.ledger.drain()
    assert front.observed.calls == [("relayed", 503)]
