"""The tracing seam: the core opens named spans; `proxy/telemetry.py` decides what they become.

Only the telemetry module imports OpenTelemetry. The core sees this Protocol and, when tracing
is off, `NoopTracer` (the "off" object), so no stage tests a flag.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Protocol


class StageTracer(Protocol):
    def span(
        self, name: str, attributes: Mapping[str, str | int | float | bool] | None = None
    ) -> contextlib.AbstractContextManager[None]: ...


class NoopTracer:
    @contextlib.contextmanager
    def span(
        self, name: str, attributes: Mapping[str, str | int | float | bool] | None = None
    ) -> Iterator[None]:
        yield
