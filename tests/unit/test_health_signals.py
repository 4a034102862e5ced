"""The sliding windows behind the health signals, driven by a manual clock."""

from __future__ import annotations

import math

import pytest

from core.clock import ManualClock
from core.health_signals import MissSpread, RequestHealth
from core.sliding_window import SlidingWindow, entropy_bits


def test_a_window_counts_the_slots_it_covers_and_forgets_older_ones() -> None:
    clock = ManualClock(start_s=0.0)
    window: SlidingWindow[str] = SlidingWindow(clock, span_s=60, slot_s=10)
    window.add("a")  # slot 0
    clock.advance(25)
    window.add("a", 2)  # slot 2
    window.add("b")
    assert window.totals(10) == {"a": 2, "b": 1}  # the current slot only
    assert window.totals(30) == {"a": 3, "b": 1}  # slots 0..2
    clock.advance(40)  # now slot 6: slot 0 is past the 60 s span
    assert window.totals(60) == {"a": 2, "b": 1}
    clock.advance(60)
    assert window.totals(60) == {}


def test_entropy_is_zero_for_one_key_and_log2_n_for_n_even_keys() -> None:
    assert entropy_bits({}) == 0.0
    assert entropy_bits({"p": 100}) == 0.0
    assert entropy_bits({str(i): 5 for i in range(8)}) == pytest.approx(3.0)
    assert entropy_bits({"a": 3, "b": 1}) == pytest.approx(-(0.75 * math.log2(0.75) + 0.25 * -2))


def test_the_fast_hit_share_counts_slow_hits_and_misses_against_it() -> None:
    clock = ManualClock(start_s=0.0)
    health = RequestHealth(clock, frozenset({"chat", "completions"}))
    health.observe("chat", "hit", 0.002)
    health.observe("chat", "hit", 0.1)  # exactly 100 ms: within
    health.observe("completions", "hit", 0.3)  # a slow hit
    health.observe("chat", "miss", 0.05)
    health.observe("metrics", "none", 0.001)  # not cache traffic
    assert health.hit_ratio(60) == 3 / 4
    assert health.fast_hit_ratio(60) == 2 / 4
    clock.advance(120)
    health.observe("chat", "miss", 0.5)
    assert (health.hit_ratio(60), health.fast_hit_ratio(60)) == (0.0, 0.0)
    assert health.hit_ratio(300) == 3 / 5


def test_miss_entropy_falls_when_one_partitions_misses_flood_in() -> None:
    clock = ManualClock(start_s=0.0)
    spread = MissSpread(clock, window_s=60)
    for i in range(16):
        spread.miss(f"{i:03x}" + "0" * 61)  # 16 partitions, one miss each
    assert spread.entropy_bits() == pytest.approx(4.0)
    clock.advance(70)  # those are past the window
    for _ in range(160):
        spread.miss("abc" + "1" * 61)
    for i in range(16):
        spread.miss(f"{i:03x}" + "0" * 61)
    assert spread.misses() == 176
    assert spread.entropy_bits() < 1.0
