"""Time sources, injected wherever a policy needs time.

Policies (LRU-K, TTL, breaker, thresholds) take a `Clock` so unit tests drive them with a
`ManualClock` instead of sleeping. `monotonic()` measures intervals inside one process; `time()`
is wall-clock seconds, used only for values that cross processes (an entry's stored-at time is
read by other replicas, so it cannot be monotonic).
"""

from __future__ import annotations

import time as _time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes back."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return _time.monotonic()

    def time(self) -> float:
        return _time.time()


class ManualClock:
    """A clock that moves only when told to; for tests and simulations."""

    def __init__(self, start_s: float = 1_000.0, wall_start_s: float = 1_700_000_000.0) -> None:
        self._mono_s = start_s
        self._wall_offset_s = wall_start_s - start_s

    def monotonic(self) -> float:
        return self._mono_s

    def time(self) -> float:
        return self._mono_s + self._wall_offset_s

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, f"a clock cannot go back ({seconds} s)"
        self._mono_s += seconds
