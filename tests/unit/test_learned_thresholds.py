"""Learned thresholds on scripted near-misses: the controller's arithmetic.

Defaults: global threshold T = 0.86 here, learn_distance 0.05 (so never under 0.81),
learn_step 0.01, threshold_min 0.80.
"""

from __future__ import annotations

import pytest

from core.semantic_config import VerifyConfig
from tiers.policies.thresholds import ThresholdController


def controller(initial: float = 0.86, **overrides: float) -> ThresholdController:
    return ThresholdController(VerifyConfig(**overrides), initial)  # type: ignore[arg-type]


def test_an_agreeing_near_miss_lowers_by_one_step_toward_its_similarity() -> None:
    c = controller()
    assert c.learned_after(None, 0.83, agreed=True) == pytest.approx(0.85)  # T − step
    assert c.learned_after(0.85, 0.83, agreed=True) == pytest.approx(0.84)
    assert c.learned_after(0.84, 0.835, agreed=True) == pytest.approx(0.835)  # not past it


def test_learning_never_goes_under_global_minus_distance_nor_threshold_min() -> None:
    c = controller()
    learned = None
    for _ in range(20):
        learned = c.learned_after(learned, 0.70, agreed=True)
    assert learned == pytest.approx(0.81)  # 0.86 − 0.05
    low = controller(initial=0.82)
    assert low.learned_after(None, 0.70, agreed=True) == pytest.approx(0.81)
    assert low.learned_after(0.81, 0.70, agreed=True) == pytest.approx(0.80)  # threshold_min
    assert low.learned_after(0.80, 0.70, agreed=True) == pytest.approx(0.80)


def test_a_disagreeing_near_miss_drops_the_learned_threshold_at_once() -> None:
    c = controller()
    assert c.learned_after(0.81, 0.84, agreed=False) is None
    assert c.learned_after(None, 0.84, agreed=False) is None


def test_a_near_miss_at_or_over_the_global_threshold_teaches_nothing() -> None:
    # Only an entry's raised floor can put a near-miss over T: learning never undercuts a floor
    # from there, since a learned threshold exists only under T.
    c = controller()
    assert c.learned_after(None, 0.87, agreed=True) is None
    assert c.learned_after(0.84, 0.87, agreed=True) == pytest.approx(0.84)


def test_the_effective_threshold_takes_the_learned_one_only_when_set_and_within_reach() -> None:
    c = controller()
    assert c.effective(0.80) == pytest.approx(0.86)
    assert c.effective(0.80, 0.83) == pytest.approx(0.83)
    assert c.effective(0.95, 0.83) == pytest.approx(0.83)
    c.record(agreed=False)  # T 0.87: a learned 0.81 is now further than 0.05 under it
    assert c.effective(0.80, 0.81) == pytest.approx(0.82)


def test_near_misses_and_learned_hits_never_move_the_global_estimate_or_threshold() -> None:
    c = controller()
    c.record_near_miss(agreed=True)
    c.record_near_miss(agreed=False)
    c.learned_hits.estimator.record(agreed=False)
    assert (c.near_misses_agreed, c.near_misses_disagreed) == (1, 1)
    assert c.global_threshold == pytest.approx(0.86)
    assert c.estimator.estimate().verified == 0
    assert c.learned_hits.estimator.estimate().wrong == 1


def test_learning_is_off_at_zero_distance() -> None:
    assert controller().learning
    assert not controller(learn_distance=0.0).learning


def switched_off() -> ThresholdController:
    """A controller whose learned hits were verified wrong often enough to stop serving them
    (3 wrong of 10: the 95% interval's low end, about 11%, is over the 1% target)."""
    c = controller()
    for agreed in [False] * 3 + [True] * 7:
        c.learned_hits.record(agreed)
    assert not c.learned_hits.serving
    return c


def test_learned_thresholds_are_not_served_while_their_estimate_is_over_the_target() -> None:
    c = switched_off()
    assert c.effective(0.80, 0.83) == pytest.approx(0.86)  # the usual threshold
    assert controller().effective(0.80, 0.83) == pytest.approx(0.83)


def test_while_off_a_candidate_only_a_learned_threshold_admits_is_held_back() -> None:
    c = switched_off()
    assert c.held_back(0.80, 0.83, 0.84)
    assert not c.held_back(0.80, 0.83, 0.82)  # under the learned threshold too
    assert not c.held_back(0.80, None, 0.84)  # nothing learned
    assert not controller().held_back(0.80, 0.83, 0.84)  # served: it would simply hit


def test_held_back_agreements_turn_learned_hits_on_again() -> None:
    c = switched_off()
    agreements = 0
    while not c.learned_hits.serving:
        c.learned_hits.record(agreed=True)
        agreements += 1
    # On again once the rate itself is at the 1% target: 3 wrong of 300.
    assert agreements == 290
    assert c.effective(0.80, 0.83) == pytest.approx(0.83)
