"""OpenTelemetry spans per stage: the whole proxy (create_app) in front of the stub upstream, its
spans taken by OpenTelemetry's in-memory exporter (the `span_exporter` seam).

A miss has `deja.request` with `deja.read`, `deja.lookup`, `deja.upstream` and `deja.store`
inside it; a hit the first three, with what it found; a refused request its status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from proxy.composition.app import create_app
from tests.conftest import make_config
from tests.support.stub_upstream import StubUpstream

QUESTION = {"model": "m", "messages": [{"role": "user", "content": "What is a span?"}]}


@pytest.fixture
async def traced(stub: StubUpstream) -> AsyncIterator[tuple[TestServer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    config = make_config(
        {
            "upstream": {"url": stub.base_url, "request_logprobs": False},
            "semantic": {"enabled": False},
            "server": {"access_log": False},
        }
    )
    server = TestServer(create_app(config, span_exporter=exporter), host="127.0.0.1", port=0)
    await server.start_server()
    yield server, exporter
    await server.close()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_miss_and_its_repeat_have_a_span_per_stage(
    traced: tuple[TestServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    async with aiohttp.ClientSession() as s:
        async with s.post(server.make_url("/v1/chat/completions"), json=QUESTION) as r:
            assert r.headers["X-Deja-Cache"] == "miss"
            entry = r.headers["X-Deja-Entry"]
        for _ in range(200):  # the store runs after the answer, in the flight's task
            if any(sp.name == "deja.store" for sp in exporter.get_finished_spans()):
                break
            await asyncio.sleep(0.01)
        miss = exporter.get_finished_spans()
        exporter.clear()
        async with s.post(server.make_url("/v1/chat/completions"), json=QUESTION) as r:
            assert r.headers["X-Deja-Cache"] == "hit"
        hit = exporter.get_finished_spans()

    request = by_name(miss, "deja.request")
    assert request.parent is None
    assert attributes(request) | {"deja.request_id": "-"} == {
        "http.method": "POST",
        "deja.route": "chat",
        "http.status_code": 200,
        "deja.request_id": "-",
        "deja.cache": "miss",
        "deja.entry": entry,
    }
    stages = ("deja.read", "deja.lookup", "deja.upstream", "deja.store")
    for name in stages:
        span = by_name(miss, name)
        assert span.parent is not None and span.parent.span_id == request.context.span_id, name
        assert span.context.trace_id == request.context.trace_id
    assert attributes(by_name(miss, "deja.lookup")) == {"deja.hit": False}
    assert attributes(by_name(miss, "deja.upstream"))["http.status_code"] == 200

    assert sorted(s.name for s in hit) == ["deja.lookup", "deja.read", "deja.request"]
    assert attributes(by_name(hit, "deja.lookup")) == {
        "deja.hit": True,
        "deja.tier": "lru_k",
        "deja.match": "exact",
    }
    request = by_name(hit, "deja.request")
    assert (attributes(request)["deja.cache"], attributes(request)["deja.tier"]) == (
        "hit",
        "lru_k",
    )


async def test_a_refused_request_has_its_status_on_its_span(
    traced: tuple[TestServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    async with (
        aiohttp.ClientSession() as s,
        s.post(server.make_url("/v1/chat/completions"), data=b"{broken") as r,
    ):
        assert r.status == 400
    request = by_name(exporter.get_finished_spans(), "deja.request")
    assert attributes(request)["http.status_code"] == 400
