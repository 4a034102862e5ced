"""Edge mode's traces join: the front (create_edge_app) relays a miss to the worker (create_app
on a unix socket) with its own span's trace context, so the worker's spans nest under the
front's, both under the client's parent, and the upstream's under the worker's upstream call.
Real Redis between them, the stub upstream behind, spans in in-memory exporters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from proxy.composition.app import create_app, create_edge_app
from proxy.edge.worker_link import UnixRoute, WorkerLink
from tests.conftest import make_config
from tests.support.stub_upstream import StubUpstream
from tests.support.unix_server import UnixServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class TracedEdge:
    def __init__(self, tmp: Path, stub: StubUpstream, redis_url: str) -> None:
        config = make_config(
            {
                "server": {"edge": True, "access_log": False},
                "redis": {"url": redis_url},
                "upstream": {"url": stub.base_url, "request_logprobs": False},
                "semantic": {"enabled": False},
            }
        )
        socket_path = str(tmp / "worker.sock")
        self.front_spans = InMemorySpanExporter()
        self.worker_spans = InMemorySpanExporter()
        worker = create_app(config, edge_worker=True, span_exporter=self.worker_spans)
        self.worker = UnixServer(worker, socket_path)
        front = create_edge_app(
            config, WorkerLink(UnixRoute(socket_path)), None, span_exporter=self.front_spans
        )
        self.front = TestServer(front)


@pytest.fixture
async def edge(tmp_path: Path, stub: StubUpstream, redis_url: str) -> AsyncIterator[TracedEdge]:
    edge = TracedEdge(tmp_path, stub, redis_url)
    await edge.worker.start()
    await edge.front.start_server()
    yield edge
    await edge.front.close()
    await edge.worker.close()


def named(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


async def test_the_workers_spans_nest_under_the_fronts(
    edge: TracedEdge, stub: StubUpstream
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Through the edge?"}]}
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    async with (
        aiohttp.ClientSession() as s,
        s.post(edge.front.make_url("/v1/chat/completions"), json=body, headers=headers) as r,
    ):
        assert r.status == 200 and r.headers["X-Deja-Cache"] == "miss"
        await r.read()
    await wait_until(
        lambda: any(s.name == "deja.upstream" for s in edge.worker_spans.get_finished_spans())
    )

    front = named(edge.front_spans.get_finished_spans(), "deja.request")
    worker = named(edge.worker_spans.get_finished_spans(), "deja.request")
    upstream = named(edge.worker_spans.get_finished_spans(), "deja.upstream")
    assert front.parent is not None and f"{front.parent.span_id:016x}" == PARENT_ID
    assert worker.parent is not None and worker.parent.span_id == front.context.span_id
    assert {f"{s.context.trace_id:032x}" for s in (front, worker, upstream)} == {TRACE_ID}
    seen = {k.lower(): v for k, v in stub.headers_seen[-1].items()}
    assert seen["traceparent"] == f"00-{TRACE_ID}-{upstream.context.span_id:016x}-01"
