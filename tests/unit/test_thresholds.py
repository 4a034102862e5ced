"""The threshold controller and the false-hit estimator on scripted evidence.

Defaults: target 1 %, aim r = 0.7 %, up = 0.01, down = 0.01·r/(1−r) = 7.0493e-5, thresholds
within [0.80, 0.99], raise margin 0.01, lower step 0.002.
"""

from __future__ import annotations

import pytest

from core.semantic_config import VerifyConfig
from tiers.policies.thresholds import FalseHitEstimator, ThresholdController, wilson_interval

DOWN = 0.01 * 0.007 / 0.993


def controller(initial: float = 0.86, **overrides: float) -> ThresholdController:
    return ThresholdController(VerifyConfig(**overrides), initial)  # type: ignore[arg-type]


def test_steps_up_on_disagreement_and_down_slowly_on_agreement() -> None:
    c = controller()
    c.record(agreed=False)
    assert c.global_threshold == pytest.approx(0.87)
    c.record(agreed=True)
    assert c.global_threshold == pytest.approx(0.87 - DOWN)
    assert pytest.approx(7.0493e-5, rel=1e-4) == DOWN
    for _ in range(99):
        c.record(agreed=True)
    assert c.global_threshold == pytest.approx(0.87 - 100 * DOWN)


def test_the_expected_step_is_zero_at_the_aimed_rate() -> None:
    # 7 wrong in 1,000 verified is exactly r = 0.7 %: the threshold ends where it started.
    c = controller()
    for i in range(1000):
        c.record(agreed=i % 142 != 0 or i >= 7 * 142)
    assert c.estimator.estimate().wrong == 7
    assert c.global_threshold == pytest.approx(0.86, abs=1e-9)


def test_a_higher_verified_rate_drives_the_threshold_up_and_a_lower_one_down() -> None:
    worse, better = controller(), controller()
    for i in range(1000):
        worse.record(agreed=i % 100 != 0)  # 1 %
        better.record(agreed=i % 500 != 0)  # 0.2 %
    assert worse.global_threshold == pytest.approx(0.86 + 10 * 0.01 - 990 * DOWN)
    assert better.global_threshold == pytest.approx(0.86 + 2 * 0.01 - 998 * DOWN)
    assert better.global_threshold < 0.86 < worse.global_threshold


def test_a_threshold_clearly_too_loose_climbs_in_bigger_steps() -> None:
    # 5 % wrong over the last 200 verified (95 % interval [2.7 %, 9.0 %], over the target):
    # once 100 are in, each disagreement moves T by up to 4 steps instead of 1.
    boosted = controller(0.80, threshold_max=2.0)
    for i in range(200):
        boosted.record(agreed=i % 20 != 19)
    plain = 0.80 + 10 * 0.01 - 190 * DOWN
    assert boosted.global_threshold > plain + 0.1
    assert boosted.boost() == 4.0  # 5 % / 0.7 % is over the cap
    # The estimate is not touched: it counts what was verified.
    assert (boosted.estimator.estimate().verified, boosted.estimator.estimate().wrong) == (200, 10)


def test_near_the_aim_each_disagreement_is_one_step() -> None:
    # 4 wrong of 200 (2 %, interval [0.78 %, 5.0 %]) is not clearly over the 1 % target.
    c = controller()
    for i in range(200):
        c.record(agreed=i % 50 != 49)
    assert c.boost() == 1.0
    assert c.global_threshold == pytest.approx(0.86 + 4 * 0.01 - 196 * DOWN)


def test_fewer_than_100_verifications_never_boost() -> None:
    c = controller(0.80)
    for _ in range(10):
        c.record(agreed=False)
    assert c.global_threshold == pytest.approx(0.90)


def test_the_boost_forgets_evidence_older_than_200_verifications() -> None:
    c = controller(0.80)
    for i in range(200):
        c.record(agreed=i % 10 != 0)
    assert c.boost() > 1.0
    for _ in range(200):
        c.record(agreed=True)
    assert c.boost() == 1.0


def test_the_global_threshold_stays_within_its_bounds() -> None:
    assert controller(0.5).global_threshold == 0.80
    assert controller(0.995).global_threshold == 0.99
    c = controller()
    for _ in range(20):
        c.record(agreed=False)
    assert c.global_threshold == 0.99
    c = controller(0.8005)
    for _ in range(100):
        c.record(agreed=True)
    assert c.global_threshold == 0.80


def test_the_effective_threshold_is_the_larger_of_global_and_floor() -> None:
    c = controller()
    assert c.neutral_floor == 0.80
    assert c.effective(c.neutral_floor) == 0.86
    assert c.effective(0.93) == 0.93
    assert c.effective(1.5) == 0.99  # clamped


def test_entry_floor_after_evidence() -> None:
    c = controller()
    # A disagreement at similarity 0.9 puts the floor just above it.
    assert c.floor_after(0.80, 0.90, agreed=False) == pytest.approx(0.91)
    # ... never lower than it was, never above the maximum.
    assert c.floor_after(0.95, 0.90, agreed=False) == 0.95
    assert c.floor_after(0.80, 0.985, agreed=False) == 0.99
    # An agreement lowers it by the lower step, down to the neutral floor.
    assert c.floor_after(0.91, 0.93, agreed=True) == pytest.approx(0.908)
    assert c.floor_after(0.801, 0.93, agreed=True) == 0.80
    assert c.floor_after(0.80, 0.93, agreed=True) == 0.80


def test_a_raised_floor_blocks_that_similarity_but_not_a_closer_match() -> None:
    c = controller()
    floor = c.floor_after(c.neutral_floor, 0.90, agreed=False)
    assert c.effective(floor) > 0.90
    assert c.effective(floor) <= 0.92


def test_complaints_are_counted_but_move_neither_threshold_nor_estimate() -> None:
    c = controller()
    for _ in range(20):
        c.record_complaint()
    assert c.global_threshold == 0.86
    assert c.complaints == 20
    estimate = c.estimator.estimate()
    assert (estimate.verified, estimate.wrong) == (0, 0)


@pytest.mark.parametrize(
    "wrong,total,low,high",
    [
        (0, 0, 0.0, 1.0),
        (1, 10, 0.017876, 0.404150),
        (10, 1000, 0.005441, 0.018309),
        (30, 1000, 0.021094, 0.042503),
        (0, 100, 0.0, 0.036993),
        (5, 5, 0.565518, 1.0),
    ],
)
def test_wilson_interval_values(wrong: int, total: int, low: float, high: float) -> None:
    got_low, got_high = wilson_interval(wrong, total)
    assert got_low == pytest.approx(low, abs=1e-6)
    assert got_high == pytest.approx(high, abs=1e-6)


def test_the_estimator_counts_verified_hits() -> None:
    estimator = FalseHitEstimator()
    assert estimator.estimate().rate == 0.0
    for agreed in (True, True, False, True):
        estimator.record(agreed)
    estimate = estimator.estimate()
    assert (estimate.verified, estimate.wrong, estimate.rate) == (4, 1, 0.25)
    assert (estimate.low, estimate.high) == wilson_interval(1, 4)
    assert estimate.low < 0.25 < estimate.high


def test_a_tighter_target_aims_lower() -> None:
    loose, tight = controller(target_false_hit_rate=0.05), controller()
    loose.record(agreed=True)
    tight.record(agreed=True)
    aim = 0.05 * 0.7
    assert 0.86 - loose.global_threshold == pytest.approx(0.01 * aim / (1 - aim))
    assert loose.global_threshold < tight.global_threshold
