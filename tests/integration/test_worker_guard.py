"""A shared worker's door: the secret or a 401 that says the secret was refused; the probes and
the scrape (GET only) without it; one log line per peer, not one per request."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from proxy.edge.worker_guard import REFUSED_HEADER, SECRET_HEADER, shared_secret_guard

SECRET = "the-shared-secret-of-the-pool"


async def answer(request: web.Request) -> web.Response:
    return web.json_response({"path": request.path})


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = web.Application(middlewares=[shared_secret_guard(SECRET)])
    app.router.add_route("*", "/{tail:.*}", answer)
    async with TestClient(TestServer(app)) as c:
        yield c


async def test_a_request_with_the_secret_gets_in(
    client: TestClient[web.Request, web.Application],
) -> None:
    async with client.post("/v1/chat/completions", headers={SECRET_HEADER: SECRET}) as reply:
        assert reply.status == 200
        assert await reply.json() == {"path": "/v1/chat/completions"}


@pytest.mark.parametrize("given", [None, "", "the-shared-secret-of-the-poo", SECRET + "x"])
async def test_without_the_secret_a_request_is_refused_and_says_so(
    client: TestClient[web.Request, web.Application], given: str | None
) -> None:
    headers = {} if given is None else {SECRET_HEADER: given}
    async with client.post("/internal/v1/edge-report", headers=headers) as reply:
        assert (reply.status, reply.headers[REFUSED_HEADER]) == (401, "1")
        error = (await reply.json())["error"]
        assert (error["type"], error["code"]) == ("authentication_error", "edge_secret_refused")


async def test_the_probes_and_the_scrape_need_no_secret_and_nothing_else_does(
    client: TestClient[web.Request, web.Application],
) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        async with client.get(path) as reply:
            assert reply.status == 200, path
    for method, path in (("POST", "/readyz"), ("GET", "/admin/v1/stats"), ("GET", "/v1/models")):
        async with client.request(method, path) as reply:
            assert reply.status == 401, (method, path)


async def test_refusals_are_logged_once_per_peer_in_a_while(
    client: TestClient[web.Request, web.Application], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="deja.edge"):
        for _ in range(5):
            async with client.post("/v1/chat/completions", headers={SECRET_HEADER: "wrong"}):
                pass
    lines = [r.getMessage() for r in caplog.records if r.name == "deja.edge"]
    assert len(lines) == 1
    assert lines[0].startswith("refused POST /v1/chat/completions from 127.0.0.1: with a wrong")
