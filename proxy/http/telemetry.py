"""Prometheus metrics, and the app's tracer: with proxy/http/traces.py, the only modules that
import Prometheus or OpenTelemetry.

The core records plain counters (`core.recorder.CacheRecorder`) and opens spans through the
`core.tracing.StageTracer` seam; this module exports the counters, traces.py the spans. Each
app gets its own Prometheus registry and its own tracer provider (nothing global), so tests can
build many apps.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from core.clock import Clock
from core.health_signals import FAST_HIT_S, WINDOWS_S, RequestHealth
from core.readings import Reading, ReadingKind, gauge
from core.recorder import CacheRecorder, NotStoredReason
from core.tracing import StageTracer
from normalize.keys.request import Route
from proxy.http.traces import shutdown_tracer

ReadingSource = Callable[[], list[Reading]]
# The Prometheus text format generate_latest writes, with its version. (prometheus_client's
# CONTENT_TYPE_LATEST now names 1.0.0, which Prometheus before 3.0 does not know.)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_KNOWN_REASONS = frozenset(map(str, NotStoredReason))
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)


class _StatsCollector(Collector):
    def __init__(self, recorder: CacheRecorder, readings: ReadingSource) -> None:
        self._recorder = recorder
        self._readings = readings

    def collect(self) -> Iterator[Any]:
        s = self._recorder.snapshot()
        hits = CounterMetricFamily(
            "deja_cache_hits",
            "Requests answered from cache, by tier and match kind",
            labels=["tier", "match"],
        )
        for (tier, match), n in sorted(s.hits.items()):
            hits.add_metric([tier, match], n)
        yield hits
        yield CounterMetricFamily(
            "deja_cache_misses", "Lookups that found nothing in any tier", value=s.misses
        )
        yield CounterMetricFamily(
            "deja_cache_bypasses",
            "Requests that skipped the lookup (not cacheable, or asked not to look)",
            value=s.bypasses,
        )
        yield CounterMetricFamily(
            "deja_cache_stores", "Answers stored in the cache", value=s.stores
        )
        yield CounterMetricFamily(
            "deja_coalesced", "Misses that joined another caller's upstream call", value=s.coalesced
        )
        yield _labelled(
            "deja_degraded",
            "Answers served in place of the upstream's, by kind",
            "kind",
            s.degraded,
        )
        yield _labelled(
            "deja_tier_errors",
            "Tier calls that failed (backend unreachable), by tier",
            "tier",
            s.tier_errors,
        )
        yield _labelled(
            "deja_not_stored",
            "Finished answers not stored, by reason (an unknown finish reason: other)",
            "reason",
            _bounded_reasons(s.not_stored),
        )
        yield _labelled(
            "deja_guard_rejections",
            "Semantic candidates refused by a meaning guard, by guard",
            "guard",
            s.guard_rejections,
        )
        yield CounterMetricFamily(
            "deja_evictions_by_feedback",
            "Entries deleted because their feedback fell below the eviction floor",
            value=s.evictions_by_feedback,
        )
        yield CounterMetricFamily(
            "deja_tokens_saved",
            "Tokens (prompt and completion) served from cache instead of the upstream",
            value=s.prompt_tokens_saved + s.completion_tokens_saved,
        )
        yield CounterMetricFamily(
            "deja_usd_saved", "Estimated upstream cost saved, in US dollars", value=s.usd_saved
        )
        yield from _families(self._readings())


def _labelled(name: str, doc: str, label: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, n in sorted(counts.items()):
        family.add_metric([key], n)
    return family


def _bounded_reasons(counts: Mapping[str, int]) -> dict[str, int]:
    """The known reasons as they are; a finish reason an upstream made up counted as "other"
    (the upstream chooses it: as a label value it would be unbounded)."""
    bounded: dict[str, int] = {}
    for reason, n in counts.items():
        key = reason if reason in _KNOWN_REASONS else "other"
        bounded[key] = bounded.get(key, 0) + n
    return bounded


def _families(readings: list[Reading]) -> Iterator[Metric]:
    """The readings as metric families, one per name, in name order."""
    by_name: dict[str, list[Reading]] = {}
    for reading in readings:
        by_name.setdefault(reading.name, []).append(reading)
    for name, group in sorted(by_name.items()):
        first = group[0]
        labels = [key for key, _ in first.labels]
        family: GaugeMetricFamily | CounterMetricFamily
        if first.kind is ReadingKind.COUNTER:
            family = CounterMetricFamily(f"deja_{name}", first.help, labels=labels)
        else:
            family = GaugeMetricFamily(f"deja_{name}", first.help, labels=labels)
        for reading in group:
            assert reading.kind is first.kind, f"{name} read as both a gauge and a counter"
            family.add_metric([value for _, value in reading.labels], reading.value)
        yield family


class RequestMetrics(Collector):
    """Request counts and latency histograms, recorded as plain integers.

    prometheus_client's Counter and Histogram take a lock per update; on a single event loop
    there is nothing to lock against, and at thousands of hits a second the locks show. The
    figures are turned into metric families only when /metrics is scraped.
    """

    def __init__(self, clock: Clock) -> None:
        # Every cached route's requests (normalize's Route: chat, completions, ...).
        self._health = RequestHealth(clock, frozenset(map(str, Route)))
        self._counts: dict[tuple[str, str, int], int] = {}
        # (route, cache) → [per-bucket counts (last: +Inf), sum of seconds]
        self._latency: dict[tuple[str, str], tuple[list[int], list[float]]] = {}

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        key = (route, cache, status)
        self._counts[key] = self._counts.get(key, 0) + 1
        hist = self._latency.get((route, cache))
        if hist is None:
            hist = ([0] * (len(_LATENCY_BUCKETS) + 1), [0.0])
            self._latency[(route, cache)] = hist
        hist[0][bisect.bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        hist[1][0] += seconds
        self._health.observe(route, cache, seconds)

    def collect(self) -> Iterator[Any]:
        counts = CounterMetricFamily(
            "deja_requests",
            "Requests by route, cache outcome and status",
            labels=["route", "cache", "status"],
        )
        for (route, cache, status), n in sorted(self._counts.items()):
            counts.add_metric([route, cache, str(status)], n)
        yield counts
        latency = HistogramMetricFamily(
            "deja_request_duration_seconds",
            "Time to the last byte of the response",
            labels=["route", "cache"],
        )
        for (route, cache), (buckets, total) in sorted(self._latency.items()):
            cumulative, running = [], 0
            for bound, n in zip([*map(str, _LATENCY_BUCKETS), "+Inf"], buckets, strict=True):
                running += n
                cumulative.append((bound, running))
            latency.add_metric([route, cache], cumulative, sum_value=total[0])
        yield latency
        yield from _families(
            [
                *(
                    gauge(
                        "hit_ratio",
                        "Hits over the cached routes' requests of the window",
                        self._health.hit_ratio(window_s),
                        window=window,
                    )
                    for window, window_s in WINDOWS_S.items()
                ),
                *(
                    gauge(
                        "fast_hit_ratio",
                        f"Hits answered within {FAST_HIT_S * 1000:g} ms over all the cached"
                        " routes' requests of the window",
                        self._health.fast_hit_ratio(window_s),
                        window=window,
                    )
                    for window, window_s in WINDOWS_S.items()
                ),
            ]
        )


class Telemetry:
    """The app's metrics registry, and its tracer (built by the composition root, which also
    hands it to the upstream client)."""

    def __init__(
        self,
        recorder: CacheRecorder,
        readings: ReadingSource,
        clock: Clock,
        tracer: StageTracer,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.tracer = tracer
        self._requests = RequestMetrics(clock)
        self.registry.register(self._requests)
        self.registry.register(_StatsCollector(recorder, readings))

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        self._requests.observe_request(route, cache, status, seconds)

    def metrics_text(self) -> bytes:
        return generate_latest(self.registry)

    def shutdown(self) -> None:
        shutdown_tracer(self.tracer)
