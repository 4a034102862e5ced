"""The tracing seam: the core opens named spans; `proxy/http/telemetry.py` decides what they become.

Only the telemetry module imports OpenTelemetry. The core sees this Protocol and, when tracing
is off, `NoopTracer` (the "off" object), so no stage tests a flag. A span is a context manager
whose value takes attributes known only at its end (the cache outcome, the status).

The stages (docs/architecture.md, "Spans per stage"): `deja.request` around every request, with
`deja.read`, `deja.lookup`, `deja.upstream` and `deja.store` inside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

AttributeValue = str | int | float | bool


class SpanNotes(Protocol):
    def is_recording(self) -> bool: ...

    def set_attribute(self, key: str, value: AttributeValue) -> None: ...


class StageTracer(Protocol):
    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanNotes]: ...


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
