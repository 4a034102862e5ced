"""The circuit breaker's state machine, driven by a ManualClock through hand-computed sequences."""

from __future__ import annotations

from dataclasses import replace

from core.clock import ManualClock
from core.config import BreakerConfig
from fallback.breaker import AlwaysClosedBreaker, BreakerState, CircuitBreaker

# Short names, so expected state sequences read as a row.
C, OP, H = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN

# A small window, so every sequence below can be counted by hand.
SMALL = BreakerConfig(
    window=4,
    min_requests=4,
    failure_share=0.5,
    cooldown_s=10.0,
    half_open_probes=2,
    successes_to_close=3,
)


def breaker(config: BreakerConfig = SMALL) -> tuple[CircuitBreaker, ManualClock]:
    clock = ManualClock()
    return CircuitBreaker(config, clock), clock


def feed(b: CircuitBreaker, outcomes: str, ttfb_s: float = 0.1) -> list[BreakerState]:
    """Asks allow() and records each outcome ("s" success, "f" failure); the state after each."""
    states = []
    for outcome in outcomes:
        assert b.allow(), f"the breaker refused a call while {b.state}"
        if outcome == "s":
            b.record_success(ttfb_s)
        else:
            b.record_failure()
        states.append(b.state)
    return states


def opened(config: BreakerConfig = SMALL) -> tuple[CircuitBreaker, ManualClock]:
    b, clock = breaker(config)
    assert feed(b, "f" * config.min_requests)[-1] is OP
    return b, clock


def test_nothing_is_judged_before_min_requests() -> None:
    b, _ = breaker(BreakerConfig())  # the defaults: 50% of the last 20, at least 10 requests
    assert feed(b, "f" * 9) == [C] * 9  # nine failures of nine: too few to judge
    assert feed(b, "f") == [OP]
    assert b.snapshot().trips == 1


def test_the_defaults_trip_at_half_of_twenty() -> None:
    b, _ = breaker(BreakerConfig())
    # Ten successes, then failures: the window is the last 20, so the tenth failure makes
    # [s×10 f×10] = 50%, the first share to reach the limit.
    assert feed(b, "s" * 10 + "f" * 9) == [C] * 19
    assert b.snapshot().failures_in_window == 9
    assert feed(b, "f") == [OP]


def test_the_share_is_taken_over_the_sliding_window_not_the_history() -> None:
    b, _ = breaker()
    # Two failures in eight outcomes (25%) overall, but the window is the last four.
    assert feed(b, "ssssss") == [C] * 6
    assert feed(b, "f") == [C]  # [s s s f]: 25%
    assert feed(b, "f") == [OP]  # [s s f f]: 50%


def test_a_share_below_the_limit_keeps_it_closed() -> None:
    b, _ = breaker(replace(SMALL, failure_share=0.75))
    assert feed(b, "ffss") == [C] * 4  # [f f s s]: 50% < 75%
    assert feed(b, "ff") == [C, C]  # [f s s f], then [s s f f]: 50%
    assert feed(b, "f") == [OP]  # [s f f f]: 75%


def test_p95_time_to_first_byte_is_off_by_default() -> None:
    b, _ = breaker(BreakerConfig())
    assert feed(b, "s" * 40, ttfb_s=300.0)[-1] is C


def test_p95_time_to_first_byte_trips_it_when_enabled() -> None:
    b, _ = breaker(BreakerConfig(ttfb_p95_limit_s=1.0))
    assert feed(b, "s" * 20, ttfb_s=0.1) == [C] * 20
    # Of 20 samples the p95 is the 19th smallest: one slow answer is an outlier...
    assert feed(b, "s", ttfb_s=5.0) == [C]
    # ...two make the 19th slow.
    assert feed(b, "s", ttfb_s=5.0) == [OP]


def test_open_refuses_calls_until_the_cool_down_ends() -> None:
    b, clock = opened()
    assert not b.allow()
    assert b.retry_after_s() == 10
    clock.advance(3.5)
    assert (b.allow(), b.retry_after_s()) == (False, 7)  # 6.5 s left, rounded up
    clock.advance(6.499)
    assert (b.state, b.retry_after_s()) == (OP, 1)
    clock.advance(0.001)
    assert b.state is H


def test_half_open_lets_a_limited_number_of_probes_through() -> None:
    b, clock = opened()
    clock.advance(10)
    assert [b.allow() for _ in range(3)] == [True, True, False]  # half_open_probes = 2
    b.record_success(0.1)  # one probe came back: its slot is free again
    assert [b.allow(), b.allow()] == [True, False]
    assert b.state is H


def test_three_successes_close_it_with_an_empty_window() -> None:
    b, clock = opened()
    clock.advance(10)
    assert feed(b, "ss") == [H, H]
    assert feed(b, "s") == [C]
    snapshot = b.snapshot()
    assert (snapshot.requests_in_window, snapshot.failures_in_window) == (0, 0)
    # The old failures are forgotten: three new ones of four do not trip it before four.
    assert feed(b, "fff") == [C] * 3


def test_a_failure_while_half_open_reopens_it_for_a_new_cool_down() -> None:
    b, clock = opened()
    clock.advance(10)
    assert feed(b, "s") == [H]
    clock.advance(2)
    assert feed(b, "f") == [OP]
    assert b.snapshot().trips == 2
    assert b.retry_after_s() == 10  # counted from the failed probe, not the first trip
    clock.advance(9.9)
    assert b.state is OP
    clock.advance(0.1)
    # A new half-open period starts from scratch: three more successes to close.
    assert feed(b, "ss") == [H, H]
    assert feed(b, "s") == [C]


def test_an_abandoned_probe_gives_its_slot_back_without_an_outcome() -> None:
    b, clock = opened()
    clock.advance(10)
    assert [b.allow(), b.allow(), b.allow()] == [True, True, False]
    b.release()  # a probe's client went away before the upstream answered
    assert b.allow()
    b.release()
    b.release()
    assert b.state is H  # a release is neither a success nor a failure
    assert feed(b, "sss") == [H, H, C]


def test_late_outcomes_of_calls_started_before_the_trip_are_ignored_while_open() -> None:
    b, _ = breaker()
    for _ in range(6):
        assert b.allow()  # six calls in flight
    for _ in range(4):
        b.record_failure()
    assert b.state is OP
    b.record_failure()
    b.record_success(0.1)
    snapshot = b.snapshot()
    assert (snapshot.state, snapshot.trips, snapshot.requests_in_window) == (OP, 1, 0)


def test_the_snapshot_reports_the_window_and_retry_after() -> None:
    b, clock = breaker()
    feed(b, "sfs")
    snapshot = b.snapshot()
    assert (snapshot.state, snapshot.failures_in_window, snapshot.requests_in_window) == (C, 1, 3)
    assert (snapshot.retry_after_s, snapshot.trips) == (1, 0)
    feed(b, "f")
    clock.advance(4.2)
    snapshot = b.snapshot()
    assert (snapshot.state, snapshot.retry_after_s, snapshot.trips) == (OP, 6, 1)


def test_the_breaker_turned_off_always_lets_calls_through() -> None:
    b = AlwaysClosedBreaker()
    for _ in range(100):
        assert b.allow()
        b.record_failure()
    assert b.snapshot().state is C
