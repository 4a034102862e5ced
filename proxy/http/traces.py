"""OpenTelemetry spans: the tracer behind `core.tracing.StageTracer`, its sampling and export.

Sampling is parent-based, with errors always kept:

    incoming traceparent, sampled       → recorded and exported (the caller's decision)
    incoming traceparent, not sampled   → not recorded
    no parent                           → recorded; `telemetry.sample_ratio` of the traces
                                          (by trace id) exported, and of the rest those whose
                                          request span ends in an error (5xx, an exception)
                                          or a degraded answer

The last case cannot be decided when the trace starts: `TailExport` holds the spans of an
undecided trace until its root (the request span) ends, then exports them all or drops them,
and remembers the decision for the spans that end later (a miss's store runs after the
response). Only those traces carry the not-sampled flag upstream, so the upstream samples them
as the ratio says, as any parent-based service would.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import (
    Decision,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.status import StatusCode
from opentelemetry.util.types import Attributes

from core.config import TelemetryConfig
from core.errors import ConfigError
from core.tracing import AttributeValue, NoopTracer, SpanNotes, StageTracer

_PROPAGATOR = TraceContextTextMapPropagator()


class OTelTracer:
    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("deja")

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanNotes]:
        # The OpenTelemetry span itself: it takes attributes, records an exception that
        # escapes it, and is the parent of the spans opened inside it (contextvars, so a
        # task started inside inherits it).
        return self._tracer.start_as_current_span(name, attributes=dict(attributes or {}))

    def request_span(
        self, name: str, headers: Mapping[str, str]
    ) -> AbstractContextManager[SpanNotes]:
        # An invalid or absent traceparent extracts to an empty context: a root span.
        parent = _PROPAGATOR.extract(headers)
        return self._tracer.start_as_current_span(name, context=parent, kind=SpanKind.SERVER)

    def outgoing_headers(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier

    def shutdown(self) -> None:
        self._provider.shutdown()


class TailExport(SpanProcessor):
    """Exports sampled spans as they end, and the spans of traces kept for how they ended.

    Bounded: at most `max_traces` undecided traces of at most `max_spans` spans each (the
    oldest undecided trace is dropped to make room), and the last `max_traces` decisions.
    """

    def __init__(self, export: SpanProcessor, max_traces: int = 1024, max_spans: int = 64):
        self._export = export
        self._max_traces = max_traces
        self._max_spans = max_spans
        self._lock = threading.Lock()
        self._pending: OrderedDict[int, list[ReadableSpan]] = OrderedDict()
        self._decided: OrderedDict[int, bool] = OrderedDict()  # trace id → kept

    def undecided_or_kept(self, trace_id: int) -> bool:
        """Whether a not-sampled span of this trace is worth recording (the sampler asks)."""
        with self._lock:
            return trace_id in self._pending or self._decided.get(trace_id, False)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        context = span.get_span_context()
        if span.parent is None and not context.trace_flags.sampled:
            with self._lock:
                self._pending[context.trace_id] = []
                while len(self._pending) > self._max_traces:
                    self._pending.popitem(last=False)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.get_span_context()
        assert context is not None, "an ended span has a context"
        if context.trace_flags.sampled:
            self._export.on_end(span)
            return
        trace_id, to_export = context.trace_id, []
        with self._lock:
            if trace_id in self._decided:
                to_export = [span] if self._decided[trace_id] else []
            elif span.parent is None and trace_id in self._pending:
                spans = self._pending.pop(trace_id)
                keep = worth_exporting(span)
                self._decide(trace_id, keep)
                to_export = [*spans, span] if keep else []
            elif trace_id in self._pending and len(self._pending[trace_id]) < self._max_spans:
                self._pending[trace_id].append(span)
        for done in to_export:
            self._export.on_end(_as_sampled(done))

    def _decide(self, trace_id: int, keep: bool) -> None:
        self._decided[trace_id] = keep
        while len(self._decided) > self._max_traces:
            self._decided.popitem(last=False)

    def shutdown(self) -> None:
        self._export.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._export.force_flush(timeout_millis)


def worth_exporting(request_span: ReadableSpan) -> bool:
    """An error (5xx, or an exception escaped the span) or a degraded answer."""
    attributes = request_span.attributes or {}
    status = attributes.get("http.status_code")
    return (
        request_span.status.status_code is StatusCode.ERROR
        or (isinstance(status, int) and status >= 500)
        or "deja.degraded" in attributes
    )


def _as_sampled(span: ReadableSpan) -> ReadableSpan:
    """The span with the sampled flag, as exporters and the batch processor expect."""
    context = span.get_span_context()
    assert context is not None, "an ended span has a context"
    sampled = SpanContext(
        context.trace_id,
        context.span_id,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=context.trace_state,
    )
    return ReadableSpan(
        name=span.name,
        context=sampled,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class ParentOrTail(Sampler):
    """The sampling of the module docstring's table."""

    def __init__(self, ratio: float, tail: TailExport) -> None:
        self._ratio = TraceIdRatioBased(ratio)
        self._tail = tail

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: object = None,
    ) -> SamplingResult:
        parent = get_current_span(parent_context).get_span_context()
        if parent.is_valid:
            if parent.trace_flags.sampled:
                return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, parent.trace_state)
            if not parent.is_remote and self._tail.undecided_or_kept(trace_id):
                return SamplingResult(Decision.RECORD_ONLY, attributes, parent.trace_state)
            return SamplingResult(Decision.DROP, None, parent.trace_state)
        by_ratio = self._ratio.should_sample(parent_context, trace_id, name)
        if by_ratio.decision is Decision.RECORD_AND_SAMPLE:
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return SamplingResult(Decision.RECORD_ONLY, attributes)

    def get_description(self) -> str:
        return f"ParentOrTail{{{self._ratio.get_description()}}}"


def build_tracer(config: TelemetryConfig, exporter: SpanExporter | None = None) -> StageTracer:
    """The tracer `config` asks for; with `exporter` (tests), spans go there as they end."""
    processor: type[SimpleSpanProcessor] | type[BatchSpanProcessor] = BatchSpanProcessor
    if exporter is not None:
        processor = SimpleSpanProcessor
    elif config.traces == "none":
        return NoopTracer()
    elif config.traces == "console":
        exporter = ConsoleSpanExporter(out=sys.stderr)
    else:
        assert config.otlp_endpoint, "config validation requires telemetry.otlp_endpoint"
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise ConfigError(
                "telemetry.traces is otlp but the package"
                " opentelemetry-exporter-otlp-proto-http is not installed"
            ) from exc
        exporter = OTLPSpanExporter(endpoint=config.otlp_endpoint)
    tail = TailExport(processor(exporter))
    provider = TracerProvider(
        resource=Resource.create({"service.name": config.service_name}),
        sampler=ParentOrTail(config.sample_ratio, tail),
    )
    provider.add_span_processor(tail)
    return OTelTracer(provider)


def shutdown_tracer(tracer: StageTracer) -> None:
    """Export what is buffered and stop (at shutdown)."""
    if isinstance(tracer, OTelTracer):
        tracer.shutdown()
