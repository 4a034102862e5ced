"""Circuit breaker for the upstream: closed → open → half-open → closed. No I/O; injected clock.

    CLOSED ──failure share over the window ≥ limit (or p95 TTFB over its limit)──▶ OPEN
    OPEN ──cool-down elapsed──▶ HALF_OPEN (lets `half_open_probes` calls through at a time)
    HALF_OPEN ──`successes_to_close` successes──▶ CLOSED   ──any failure──▶ OPEN

The window holds the last `window` outcomes; the breaker judges it only once it holds
`min_requests`. Connection errors, timeouts and 5xx are failures; 4xx are the client's doing
and count as successes of the upstream. Every `allow()` that returned True must be followed
by exactly one of `record_success`, `record_failure` or `release` (the call was abandoned).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from core.clock import Clock
from core.config import BreakerConfig


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    state: BreakerState
    failures_in_window: int
    requests_in_window: int
    retry_after_s: int
    trips: int


class Breaker(Protocol):
    def allow(self) -> bool: ...
    def record_success(self, ttfb_s: float) -> None: ...
    def record_failure(self) -> None: ...
    def release(self) -> None: ...
    def retry_after_s(self) -> int: ...
    def snapshot(self) -> BreakerSnapshot: ...


class CircuitBreaker:
    def __init__(self, config: BreakerConfig, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._window: deque[tuple[bool, float]] = deque(maxlen=config.window)
        self._opened_at = 0.0
        self._probes_in_flight = 0
        self._probe_successes = 0
        self.trips = 0

    @property
    def state(self) -> BreakerState:
        if self._state is BreakerState.OPEN and self._cooled_down():
            self._state = BreakerState.HALF_OPEN
            self._probes_in_flight = 0
            self._probe_successes = 0
        return self._state

    def _cooled_down(self) -> bool:
        return self._clock.monotonic() - self._opened_at >= self._config.cooldown_s

    def allow(self) -> bool:
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if (
            state is BreakerState.HALF_OPEN
            and self._probes_in_flight < self._config.half_open_probes
        ):
            self._probes_in_flight += 1
            return True
        return False

    def record_success(self, ttfb_s: float) -> None:
        if self._state is BreakerState.HALF_OPEN:
            self._probes_in_flight = max(0, self._probes_in_flight - 1)
            self._probe_successes += 1
            if self._probe_successes >= self._config.successes_to_close:
                self._state = BreakerState.CLOSED
                self._window.clear()
            return
        if self._state is BreakerState.CLOSED:
            self._window.append((True, ttfb_s))
            self._judge()

    def record_failure(self) -> None:
        if self._state is BreakerState.HALF_OPEN:
            self._trip()
            return
        if self._state is BreakerState.CLOSED:
            self._window.append((False, 0.0))
            self._judge()

    def release(self) -> None:
        if self._state is BreakerState.HALF_OPEN:
            self._probes_in_flight = max(0, self._probes_in_flight - 1)

    def _judge(self) -> None:
        cfg = self._config
        if len(self._window) < cfg.min_requests:
            return
        failures = sum(1 for ok, _ in self._window if not ok)
        if failures / len(self._window) >= cfg.failure_share:
            self._trip()
            return
        if cfg.ttfb_p95_limit_s > 0:
            ttfbs = sorted(t for ok, t in self._window if ok)
            if len(ttfbs) >= cfg.min_requests:
                # Nearest rank: of 20 samples the 19th, so one outlier alone does not trip it.
                p95 = ttfbs[math.ceil(0.95 * len(ttfbs)) - 1]
                if p95 > cfg.ttfb_p95_limit_s:
                    self._trip()

    def _trip(self) -> None:
        self._state = BreakerState.OPEN
        self._opened_at = self._clock.monotonic()
        self._window.clear()
        self.trips += 1

    def retry_after_s(self) -> int:
        if self.state is not BreakerState.OPEN:
            return 1
        left = self._config.cooldown_s - (self._clock.monotonic() - self._opened_at)
        return max(1, math.ceil(left))

    def snapshot(self) -> BreakerSnapshot:
        failures = sum(1 for ok, _ in self._window if not ok)
        return BreakerSnapshot(
            self.state, failures, len(self._window), self.retry_after_s(), self.trips
        )


class AlwaysClosedBreaker:
    """The breaker turned off: every call goes through."""

    def allow(self) -> bool:
        return True

    def record_success(self, ttfb_s: float) -> None:
        return None

    def record_failure(self) -> None:
        return None

    def release(self) -> None:
        return None

    def retry_after_s(self) -> int:
        return 1

    def snapshot(self) -> BreakerSnapshot:
        return BreakerSnapshot(BreakerState.CLOSED, 0, 0, 1, 0)
