"""The tracing seam: the core opens named spans; `proxy/http/telemetry.py` decides what they become.

Only the telemetry module imports OpenTelemetry. The core sees this Protocol and, when tracing
is off, `NoopTracer` (the "off" object), so no stage tests a flag. A span is a context manager
whose value takes attributes known only at its end (the cache outcome, the status).

The stages (docs/architecture.md, "Spans per stage"): `deja.request` around every request, with
`deja.read`, `deja.lookup`, `deja.upstream` and `deja.store` inside it.

Traces join across processes through W3C trace context: `request_span` makes the incoming
`traceparent`/`tracestate` the parent of the request's span, and `outgoing_headers` gives the
headers that carry the current span on to the upstream. The "off" tracer gives none, so the
client's own trace headers, forwarded like its other headers, reach the upstream unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

AttributeValue = str | int | float | bool


class SpanNotes(Protocol):
    def is_recording(self) -> bool: ...

    def set_attribute(self, key: str, value: AttributeValue) -> None: ...


# The W3C trace context headers (https://www.w3.org/TR/trace-context/).
TRACE_HEADERS = frozenset({"traceparent", "tracestate"})


class StageTracer(Protocol):
    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanNotes]:
        """A span inside the current one (or a root)."""
        ...

    def request_span(
        self, name: str, headers: Mapping[str, str]
    ) -> AbstractContextManager[SpanNotes]:
        """The span of an incoming request: a child of the trace context its `headers` carry
        (`traceparent`, `tracestate`), or a root without one."""
        ...

    def outgoing_headers(self) -> dict[str, str]:
        """The trace context headers for a call made now, naming the current span; {} when
        there is nothing to carry."""
        ...


class _NoSpan:
    """The span of a tracer that is off: one shared object, no generator per call (a hit
    opens three spans)."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        return None


_NO_SPAN = _NoSpan()


class NoopTracer:
    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanNotes]:
        return _NO_SPAN

    def request_span(
        self, name: str, headers: Mapping[str, str]
    ) -> AbstractContextManager[SpanNotes]:
        return _NO_SPAN

    def outgoing_headers(self) -> dict[str, str]:
        return {}
