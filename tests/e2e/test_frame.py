"""The request frame: every route's errors become OpenAI-style error objects with a request id."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from core.errors import InvalidRequest
from proxy.http.access_log import NoAccessLog
from proxy.http.finished_requests import RequestLedger
from proxy.http.frame import RequestFrame


class Observed:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        self.calls.append((route, cache, status))


async def broken(request: web.Request) -> web.StreamResponse:
    raise RuntimeError("a bug")


async def refused(request: web.Request) -> web.StreamResponse:
    raise InvalidRequest("'model' is required")


async def test_errors_become_error_objects_and_every_request_is_observed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observed = Observed()
    ledger = RequestLedger(observed, NoAccessLog(), interval_s=60)
    app = web.Application()
    frame = RequestFrame(app, ledger)
    frame.route("/broken", "broken", broken)
    frame.route("/refused", "refused", refused, methods=["POST"])
    frame.not_found_route()
    server = TestServer(app)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as s:
            with caplog.at_level(logging.ERROR, logger="deja.proxy"):
                async with s.get(server.make_url("/broken")) as r:
                    assert r.status == 500
                    body = await r.json()
                    request_id = r.headers["X-Request-Id"]
            assert body["error"]["type"] == "server_error"
            assert "request id" in body["error"]["message"]
            # The traceback is logged with the request id, so the client's id finds it.
            assert any(request_id in rec.getMessage() and rec.exc_info for rec in caplog.records)

            async with s.post(server.make_url("/refused")) as r:
                assert r.status == 400
                assert (await r.json())["error"]["message"] == "'model' is required"
            async with s.get(server.make_url("/refused")) as r:
                assert r.status == 405 and r.headers["Allow"] == "POST"
            async with s.get(server.make_url("/nowhere")) as r:
                assert r.status == 404 and (await r.json())["error"]["code"]
    finally:
        await server.close()
    ledger.drain()
    assert [(route, status) for route, _, status in observed.calls] == [
        ("broken", 500),
        ("refused", 400),
        ("refused", 405),
        ("unknown", 404),
    ]
