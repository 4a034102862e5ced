"""The common similarity scale: a language's cosine, read where every level is defined."""

from __future__ import annotations

import pytest

from core.semantic_config import VerifyConfig
from tiers.policies.similarity_scale import SimilarityScale
from tiers.policies.thresholds import ThresholdController

SCALE = SimilarityScale(0.85, {"zh": 0.95})


def test_the_reference_language_is_read_as_is() -> None:
    assert SCALE.common("en", 0.8731) == 0.8731
    assert SCALE.common("fr", 0.5) == 0.5  # no line of its own


def test_a_language_threshold_lands_on_the_reference_and_one_stays_one() -> None:
    assert SCALE.common("zh", 0.95) == pytest.approx(0.85, abs=1e-12)
    assert SCALE.common("zh", 1.0) == pytest.approx(1.0, abs=1e-12)


def test_a_crowded_scale_is_stretched_so_margins_mean_the_same() -> None:
    # e5's 0.05 under its threshold is three times MiniLM's: 0.15 on the common scale.
    assert SCALE.common("zh", 0.90) == pytest.approx(0.70, abs=1e-12)
    assert SCALE.common("zh", 0.97) - SCALE.common("zh", 0.96) == pytest.approx(0.03, abs=1e-12)


def test_answers_agree_on_the_common_scale() -> None:
    thresholds = ThresholdController(VerifyConfig(answer_agreement=0.85), 0.85, SCALE)
    # Two different Chinese answers score 0.86 by e5 (measured): a disagreement, not an
    # agreement as the bare 0.85 would say; two that say the same score 0.954.
    assert not thresholds.answers_agree(0.86, "zh")
    assert thresholds.answers_agree(0.954, "zh")
    assert thresholds.answers_agree(0.86, "en")


def test_an_anchor_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(AssertionError):
        SimilarityScale(0.85, {"zh": 1.0})
