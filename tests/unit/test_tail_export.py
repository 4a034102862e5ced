"""Sampling with errors kept (proxy/http/traces.py): a root the ratio did not pick is recorded,
its spans held until it ends, then exported or dropped by how it ended; spans ending later
follow that decision; the undecided traces held are bounded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from proxy.http.traces import ParentOrTail, TailExport


@pytest.fixture
def traced() -> Iterator[tuple[Tracer, InMemorySpanExporter, TailExport]]:
    exporter = InMemorySpanExporter()
    tail = TailExport(SimpleSpanProcessor(exporter), max_traces=2)
    provider = TracerProvider(sampler=ParentOrTail(0.0, tail))  # the ratio picks nothing
    provider.add_span_processor(tail)
    yield provider.get_tracer("test"), exporter, tail
    provider.shutdown()


def test_an_error_exports_its_whole_trace_and_the_spans_ending_after_it(
    traced: tuple[Tracer, InMemorySpanExporter, TailExport],
) -> None:
    tracer, exporter, _ = traced
    with tracer.start_as_current_span("deja.request") as request:
        with tracer.start_as_current_span("deja.read"):
            pass
        late = tracer.start_span("deja.store")  # started inside, ends after the request
        assert exporter.get_finished_spans() == ()  # held: the trace is undecided
        request.set_attribute("http.status_code", 503)
    late.end()
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["deja.read", "deja.request", "deja.store"]
    assert all(s.context.trace_flags.sampled for s in exporter.get_finished_spans())
    assert len({s.context.trace_id for s in exporter.get_finished_spans()}) == 1


def test_a_plain_answer_is_dropped_with_its_late_spans(
    traced: tuple[Tracer, InMemorySpanExporter, TailExport],
) -> None:
    tracer, exporter, _ = traced
    with tracer.start_as_current_span("deja.request") as request:
        late = tracer.start_span("deja.store")
        request.set_attribute("http.status_code", 200)
    late.end()
    with tracer.start_as_current_span("deja.request") as request:
        request.set_attribute("deja.degraded", "stale")  # degraded: kept
    assert [s.name for s in exporter.get_finished_spans()] == ["deja.request"]


def test_the_undecided_traces_held_are_bounded(
    traced: tuple[Tracer, InMemorySpanExporter, TailExport],
) -> None:
    tracer, exporter, tail = traced
    oldest = tracer.start_span("deja.request")
    others = [tracer.start_span("deja.request") for _ in range(2)]
    assert not tail.undecided_or_kept(oldest.get_span_context().trace_id)  # forgotten
    oldest.set_attribute("http.status_code", 500)
    oldest.end()  # its decision could not be kept: nothing is exported for it
    for span in others:
        span.set_attribute("http.status_code", 500)
        span.end()
    assert len(exporter.get_finished_spans()) == 2
