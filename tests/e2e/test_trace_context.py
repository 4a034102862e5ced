"""Traces that join: the whole proxy (create_app) between a client sending W3C trace context and
the stub upstream, which records the headers it received; spans taken by OpenTelemetry's
in-memory exporter (the `span_exporter` seam).

The client's traceparent is the parent of `deja.request`; the upstream's is `deja.upstream`.
Sampling follows a parent's flag; without one `telemetry.sample_ratio` decides, except that an
error or a degraded answer is always exported, with every span of its trace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core.clock import ManualClock
from proxy.composition.app import create_app
from tests.conftest import make_config
from tests.support.stub_upstream import StubUpstream

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SAMPLED = f"00-{TRACE_ID}-{PARENT_ID}-01"
NOT_SAMPLED = f"00-{TRACE_ID}-{PARENT_ID}-00"
TTL_S = 60


class Traced:
    def __init__(self, stub: StubUpstream) -> None:
        self.stub = stub
        self.exporter = InMemorySpanExporter()
        self.clock = ManualClock()
        self.servers: list[TestServer] = []

    async def start(self, sample_ratio: float = 1.0) -> str:
        config = make_config(
            {
                "upstream": {
                    "url": self.stub.base_url,
                    "request_logprobs": False,
                    "max_retries": 0,
                },
                "semantic": {"enabled": False},
                "server": {"access_log": False},
                "telemetry": {"sample_ratio": sample_ratio},
                "ttl": {"base_ttl_s": TTL_S, "jitter_min": 1, "jitter_max": 1},
            }
        )
        app = create_app(config, self.clock, span_exporter=self.exporter)
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        self.servers.append(server)
        return str(server.make_url("/v1/chat/completions"))

    async def spans_once_stored(self) -> tuple[ReadableSpan, ...]:
        """The finished spans, once the miss's store (which ends after the response) is in."""
        for _ in range(200):
            spans = self.exporter.get_finished_spans()
            if any(s.name == "deja.store" for s in spans):
                break
            await asyncio.sleep(0.01)
        return self.exporter.get_finished_spans()


@pytest.fixture
async def traced(stub: StubUpstream) -> AsyncIterator[Traced]:
    t = Traced(stub)
    yield t
    for server in t.servers:
        await server.close()


def ask(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


async def post(url: str, text: str, headers: dict[str, str] | None = None) -> dict[str, str]:
    async with aiohttp.ClientSession() as s, s.post(url, json=ask(text), headers=headers) as r:
        await r.read()
        return {"status": str(r.status), **dict(r.headers)}


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def traceparent_seen(stub: StubUpstream) -> tuple[str, str, bool]:
    """(trace id, parent span id, sampled) of the last upstream request's traceparent."""
    headers = {k.lower(): v for k, v in stub.headers_seen[-1].items()}
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert version == "00"
    return trace_id, span_id, bool(int(flags, 16) & 1)


async def test_a_sampled_parent_is_followed_and_its_context_carried_upstream(
    traced: Traced,
) -> None:
    url = await traced.start(sample_ratio=0.0)  # the parent's flag, not the ratio, decides
    headers = {"traceparent": SAMPLED, "tracestate": "vendor=abc"}
    assert (await post(url, "joined?", headers))["X-Deja-Cache"] == "miss"
    spans = await traced.spans_once_stored()

    request = by_name(spans, "deja.request")
    assert request.parent is not None and request.parent.is_remote
    assert f"{request.parent.span_id:016x}" == PARENT_ID
    assert all(f"{s.context.trace_id:032x}" == TRACE_ID for s in spans)
    upstream = by_name(spans, "deja.upstream")
    assert upstream.parent is not None and upstream.parent.span_id == request.context.span_id
    # The upstream saw the proxy's upstream span as its parent, sampled, with the tracestate.
    assert traceparent_seen(traced.stub) == (TRACE_ID, f"{upstream.context.span_id:016x}", True)
    seen = {k.lower(): v for k, v in traced.stub.headers_seen[-1].items()}
    assert seen["tracestate"] == "vendor=abc"


async def test_a_parent_not_sampled_is_followed_and_still_carried(traced: Traced) -> None:
    url = await traced.start(sample_ratio=1.0)
    assert (await post(url, "quiet?", {"traceparent": NOT_SAMPLED}))["status"] == "200"
    await asyncio.sleep(0.05)
    assert traced.exporter.get_finished_spans() == ()
    trace_id, span_id, sampled = traceparent_seen(traced.stub)
    assert (trace_id, sampled) == (TRACE_ID, False) and span_id != PARENT_ID


async def test_without_a_parent_the_ratio_decides(traced: Traced) -> None:
    url = await traced.start(sample_ratio=0.0)
    assert (await post(url, "unsampled?"))["X-Deja-Cache"] == "miss"
    await asyncio.sleep(0.05)
    assert traced.exporter.get_finished_spans() == ()
    trace_id, _, sampled = traceparent_seen(traced.stub)
    assert not sampled and trace_id != TRACE_ID  # a new trace, not sampled upstream either

    url = await traced.start(sample_ratio=1.0)
    await post(url, "sampled?")
    spans = await traced.spans_once_stored()
    assert {s.name for s in spans} >= {"deja.request", "deja.upstream", "deja.store"}
    assert by_name(spans, "deja.request").parent is None
    assert traceparent_seen(traced.stub)[2]


async def test_an_error_is_exported_whatever_the_ratio_with_every_span(traced: Traced) -> None:
    url = await traced.start(sample_ratio=0.0)
    traced.stub.behaviour.status = 500
    reply = await post(url, "failing?")
    assert reply["status"].startswith("5")
    await asyncio.sleep(0.05)
    spans = traced.exporter.get_finished_spans()
    request = by_name(spans, "deja.request")
    assert request.attributes is not None and request.attributes["http.status_code"] >= 500
    assert {s.name for s in spans} >= {"deja.request", "deja.read", "deja.lookup", "deja.upstream"}
    assert len({s.context.trace_id for s in spans}) == 1
    assert all(s.context.trace_flags.sampled for s in spans)


async def test_a_degraded_answer_is_exported_whatever_the_ratio(traced: Traced) -> None:
    url = await traced.start(sample_ratio=0.0)
    assert (await post(url, "stale soon?"))["X-Deja-Cache"] == "miss"
    await asyncio.sleep(0.05)
    traced.clock.advance(TTL_S + 1)  # expired, within its grace for degraded answers
    traced.stub.behaviour.status = 500
    reply = await post(url, "stale soon?")
    assert reply.get("X-Deja-Degraded") == "stale", reply
    await asyncio.sleep(0.05)
    (request,) = [s for s in traced.exporter.get_finished_spans() if s.name == "deja.request"]
    assert request.attributes is not None and request.attributes["deja.degraded"] == "stale"
