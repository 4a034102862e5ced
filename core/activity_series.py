"""The last hour of this process's activity, one point every `interval_s`, for the dashboard.

A policy-like object: it keeps no task and reads no clock but the one it is given. Finished
requests are observed as they are counted for the metrics (`observe_request`, the same seam as
the request metrics; edge mode's worker observes its fronts' requests through it too), and a
periodic task calls `sample` with the recorder's counts and the state of the moment. A point
holds what happened since the one before (rates, hit rates, latency percentiles) and what was
true when it was taken (threshold, false-hit estimate, breaker, Redis, sizes).

The ring keeps `window_s / interval_s` points. Latencies of one interval are kept up to
`max_latencies` per outcome; past that, a uniform sample of them (reservoir sampling with a
seeded generator, so a test sees the same points twice), which keeps percentiles honest at any
load for a fixed memory.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from core.clock import Clock
from core.recorder import CacheCounts

# The outcomes whose latency the dashboard plots (the request metrics' `cache` label).
LATENCY_OUTCOMES = ("hit", "miss")
PERCENTILES = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class SeriesState:
    """What is true at the moment of a sample (read by the composition root's report)."""

    global_threshold: float
    false_hit_rate: float
    false_hit_low: float
    false_hit_high: float
    false_hit_target: float
    verified_hits: int
    breaker_state: str
    redis_up: bool | None  # None: no Redis configured
    sizes: Mapping[str, float] = field(default_factory=dict)  # e.g. semantic_entries


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    at_s: float  # wall-clock time of the sample
    interval_s: float  # seconds since the previous sample (monotonic)
    requests_per_s: float
    hit_rate: float  # hits / (hits + misses) in the interval; 0.0 with neither
    # "tier/match" → that kind's share of the interval's lookups (hits + misses)
    hit_rate_by_kind: Mapping[str, float]
    hits: int
    misses: int
    bypasses: int
    prompt_tokens_saved: int
    completion_tokens_saved: int
    usd_saved: float
    # outcome ("hit", "miss") → {"p50": s, "p95": s, "p99": s, "count": n}; absent without any
    latency_s: Mapping[str, Mapping[str, float]]
    state: SeriesState


class ActivitySeries:
    def __init__(
        self,
        clock: Clock,
        interval_s: float = 10.0,
        window_s: float = 3600.0,
        max_latencies: int = 10_000,
        seed: int = 0,
    ) -> None:
        assert interval_s > 0 and window_s >= interval_s, "a window holds at least one interval"
        self._clock = clock
        self.interval_s = interval_s
        self.window_s = window_s
        self._points: deque[SeriesPoint] = deque(maxlen=math.ceil(window_s / interval_s))
        self._max_latencies = max_latencies
        self._random = random.Random(seed)
        self._latencies: dict[str, list[float]] = {name: [] for name in LATENCY_OUTCOMES}
        self._seen: dict[str, int] = dict.fromkeys(LATENCY_OUTCOMES, 0)
        self._last: CacheCounts | None = None
        self._last_s = clock.monotonic()

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        """A finished request (the `RequestObserver` seam): hits' and misses' latencies."""
        kept = self._latencies.get(cache)
        if kept is None:
            return
        self._seen[cache] += 1
        if len(kept) < self._max_latencies:
            kept.append(seconds)
            return
        slot = self._random.randrange(self._seen[cache])
        if slot < self._max_latencies:
            kept[slot] = seconds

    def sample(self, counts: CacheCounts, state: SeriesState) -> SeriesPoint:
        """Close the interval: a point of what changed since the last sample, kept in the
        ring. The first sample counts from zero (from the process's start)."""
        now_s = self._clock.monotonic()
        interval_s = max(now_s - self._last_s, 1e-9)
        before = self._last
        hits = _delta_map(counts.hits, before.hits if before else {})
        misses = counts.misses - (before.misses if before else 0)
        bypasses = counts.bypasses - (before.bypasses if before else 0)
        total_hits = sum(hits.values())
        lookups = total_hits + misses
        point = SeriesPoint(
            at_s=self._clock.time(),
            interval_s=interval_s,
            requests_per_s=(lookups + bypasses) / interval_s,
            hit_rate=total_hits / lookups if lookups else 0.0,
            hit_rate_by_kind={
                f"{tier}/{match}": n / lookups for (tier, match), n in sorted(hits.items()) if n
            },
            hits=total_hits,
            misses=misses,
            bypasses=bypasses,
            prompt_tokens_saved=counts.prompt_tokens_saved
            - (before.prompt_tokens_saved if before else 0),
            completion_tokens_saved=counts.completion_tokens_saved
            - (before.completion_tokens_saved if before else 0),
            usd_saved=counts.usd_saved - (before.usd_saved if before else 0.0),
            latency_s=self._take_latencies(),
            state=state,
        )
        self._points.append(point)
        self._last, self._last_s = counts, now_s
        return point

    def points(self) -> Sequence[SeriesPoint]:
        """Oldest first."""
        return tuple(self._points)

    def _take_latencies(self) -> dict[str, dict[str, float]]:
        taken: dict[str, dict[str, float]] = {}
        for name, kept in self._latencies.items():
            if kept:
                ordered = sorted(kept)
                summary = {f"p{p}": _percentile(ordered, p) for p in PERCENTILES}
                taken[name] = {**summary, "count": float(self._seen[name])}
            self._latencies[name] = []
            self._seen[name] = 0
        return taken


def _delta_map(
    now: Mapping[tuple[str, str], int], before: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], int]:
    return {key: n - before.get(key, 0) for key, n in now.items()}


def _percentile(ordered: list[float], p: int) -> float:
    """The nearest-rank percentile of a sorted, non-empty list."""
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]
