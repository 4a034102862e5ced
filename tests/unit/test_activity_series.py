"""ActivitySeries: points of what changed per interval, a bounded ring, latency percentiles."""

from __future__ import annotations

from core.activity_series import ActivitySeries, SeriesState
from core.clock import ManualClock
from core.recorder import CacheRecorder

STATE = SeriesState(
    global_threshold=0.9,
    false_hit_rate=0.01,
    false_hit_low=0.0,
    false_hit_high=0.05,
    false_hit_target=0.02,
    verified_hits=10,
    breaker_state="closed",
    redis_up=None,
)


def test_a_point_holds_the_interval_s_changes_not_the_totals() -> None:
    clock, recorder = ManualClock(), CacheRecorder()
    series = ActivitySeries(clock, interval_s=10.0, window_s=60.0)
    for _ in range(3):
        recorder.hit("lru_k", "exact", 10, 20, 0.5)
    recorder.hit("semantic", "semantic", 5, 5, 0.25)
    recorder.miss("p")
    recorder.bypass()
    clock.advance(10.0)
    first = series.sample(recorder.snapshot(), STATE)
    assert (first.hits, first.misses, first.bypasses) == (4, 1, 1)
    assert first.requests_per_s == 0.6
    assert first.hit_rate == 0.8
    assert first.hit_rate_by_kind == {"lru_k/exact": 0.6, "semantic/semantic": 0.2}
    assert (first.prompt_tokens_saved, first.completion_tokens_saved) == (35, 65)
    assert first.usd_saved == 1.75
    assert first.at_s == clock.time()

    recorder.miss("p")
    recorder.miss("p")
    clock.advance(5.0)
    second = series.sample(recorder.snapshot(), STATE)
    assert (second.hits, second.misses, second.interval_s) == (0, 2, 5.0)
    assert (second.hit_rate, second.hit_rate_by_kind, second.usd_saved) == (0.0, {}, 0.0)
    assert second.requests_per_s == 0.4
    assert [p.misses for p in series.points()] == [1, 2]


def test_the_ring_keeps_the_window_s_points_oldest_first() -> None:
    clock, recorder = ManualClock(), CacheRecorder()
    series = ActivitySeries(clock, interval_s=10.0, window_s=30.0)
    for n in range(5):
        for _ in range(n):
            recorder.miss("p")
        clock.advance(10.0)
        series.sample(recorder.snapshot(), STATE)
    assert [p.misses for p in series.points()] == [2, 3, 4]


def test_latency_percentiles_per_outcome_then_reset() -> None:
    clock, recorder = ManualClock(), CacheRecorder()
    series = ActivitySeries(clock)
    for ms in range(1, 101):  # hits of 1..100 ms
        series.observe_request("chat", "hit", 200, ms / 1000)
    series.observe_request("chat", "miss", 200, 0.5)
    series.observe_request("chat", "bypass", 200, 9.0)  # not plotted
    point = series.sample(recorder.snapshot(), STATE)
    assert point.latency_s["hit"] == {"p50": 0.05, "p95": 0.095, "p99": 0.099, "count": 100.0}
    assert point.latency_s["miss"] == {"p50": 0.5, "p95": 0.5, "p99": 0.5, "count": 1.0}
    assert set(point.latency_s) == {"hit", "miss"}
    assert series.sample(recorder.snapshot(), STATE).latency_s == {}


def test_past_max_latencies_a_uniform_sample_is_kept() -> None:
    series = ActivitySeries(ManualClock(), max_latencies=100)
    for n in range(10_000):  # 0..9.999 s, uniform
        series.observe_request("chat", "hit", 200, n / 1000)
    hit = series.sample(CacheRecorder().snapshot(), STATE).latency_s["hit"]
    assert hit["count"] == 10_000.0
    # A sample of 100 out of 10,000: its median is near the true one (5 s), not the first 100's.
    assert 3.5 < hit["p50"] < 6.5
