"""Health signals over sliding windows: what the alert rules in deploy/prometheus-rules.yml read.

`RequestHealth` sees every finished request of a cached route (fed at the request ledger's
drain, edge mode's front reports included) and answers the hit ratio and the share of requests
that were hits answered within `FAST_HIT_S`: the number a user feels, which falls when the hit
rate falls *or* when hits get slow. `MissSpread` sees every miss with its partition and
answers how spread the recent misses are (Shannon entropy of their partitions): normal traffic
misses across many partitions; a flood of misses from one (a client looping on one prompt
family, a tenant's bulk job with a system prompt nobody cached) makes it fall while the miss
rate rises, which is the miss storm the alert looks for.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.clock import Clock
from core.sliding_window import SlidingWindow, entropy_bits

FAST_HIT_S = 0.1
# The windows exported (the `window` label of the ratio gauges); the longest sets the span kept.
WINDOWS_S: Mapping[str, float] = MappingProxyType({"1m": 60.0, "5m": 300.0, "15m": 900.0})
_REQUESTS, _HITS, _FAST_HITS = "requests", "hits", "fast_hits"


class RequestHealth:
    """Hit ratio and fast-hit share of the requests of `cached_routes` (route labels, such as
    "chat"), over `WINDOWS_S`."""

    def __init__(self, clock: Clock, cached_routes: frozenset[str]) -> None:
        self._window: SlidingWindow[str] = SlidingWindow(clock, span_s=max(WINDOWS_S.values()))
        self._cached_routes = cached_routes

    def observe(self, route: str, cache: str, seconds: float) -> None:
        if route not in self._cached_routes:
            return  # /metrics, /healthz and pass-through are not cache traffic
        self._window.add(_REQUESTS)
        if cache == "hit":
            self._window.add(_HITS)
            if seconds <= FAST_HIT_S:
                self._window.add(_FAST_HITS)

    def hit_ratio(self, window_s: float) -> float:
        """Hits over the cached routes' requests of the last `window_s` (0 without any)."""
        counts = self._window.totals(window_s)
        return counts[_HITS] / counts[_REQUESTS] if counts[_REQUESTS] else 0.0

    def fast_hit_ratio(self, window_s: float) -> float:
        """Hits answered within FAST_HIT_S over all the cached routes' requests of the window."""
        counts = self._window.totals(window_s)
        return counts[_FAST_HITS] / counts[_REQUESTS] if counts[_REQUESTS] else 0.0


class MissSpread:
    """How spread recent misses are over partitions, as entropy in bits.

    A partition is identified by the first `prefix_chars` hex characters of its hash (4,096
    buckets for 3): enough to tell partitions apart at any realistic count, and a bound on the
    memory a window holds whatever the traffic.
    """

    def __init__(self, clock: Clock, window_s: float = 60.0, prefix_chars: int = 3) -> None:
        self.window_s = window_s
        self._prefix_chars = prefix_chars
        self._window: SlidingWindow[str] = SlidingWindow(clock, span_s=window_s)

    def miss(self, partition: str) -> None:
        self._window.add(partition[: self._prefix_chars])

    def entropy_bits(self) -> float:
        """0 with no misses or all in one partition; log2(n) spread evenly over n."""
        return entropy_bits(self._window.totals(self.window_s))

    def misses(self) -> int:
        return sum(self._window.totals(self.window_s).values())
