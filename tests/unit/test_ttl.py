"""The dynamic TTL (DESIGN.md "Dynamic TTL") on hand-computed cases.

ttl_s = base × clamp(0.5·confidence + 0.5·certainty + 0.25·feedback, 0.3, 1.5) × jitter
"""

from __future__ import annotations

import math
import random

import pytest

from core.config import TtlConfig
from tiers.policies.ttl import (
    AnswerCertainty,
    TtlPolicy,
    certainty_from_chat_logprobs,
    certainty_from_text_logprobs,
    signal_value,
)

UNJITTERED = TtlConfig(jitter_min=1.0, jitter_max=1.0)


class EdgeJitter(random.Random):
    """Jitter pinned to one end of its range."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self._high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self._high else a


def policy(config: TtlConfig = UNJITTERED) -> TtlPolicy:
    return TtlPolicy(config)


# --- the formula --------------------------------------------------------------------------


def test_a_neutral_entry_gets_exactly_the_base_ttl() -> None:
    # No logprobs: confidence = certainty = 1, no feedback → factor 0.5 + 0.5 = 1.
    assert policy().ttl_s(1.0, 1.0) == 300.0
    assert policy(TtlConfig(base_ttl_s=120.0, jitter_min=1.0, jitter_max=1.0)).ttl_s(1, 1) == 120.0


@pytest.mark.parametrize(
    "confidence,certainty,feedback,ttl_s",
    [
        (0.8, 0.6, (), 300 * 0.7),  # 0.4 + 0.3
        (0.4, 0.2, (), 90.0),  # 0.2 + 0.1 = 0.3, exactly the floor
        (0.1, 0.1, (), 90.0),  # 0.1 → clamped up to 0.3
        (1.0, 1.0, (1.2,), 390.0),  # one useful: 1 + 0.25·1.2 = 1.3
        (1.0, 1.0, (-0.8,), 240.0),  # one irrelevant: 1 − 0.2 = 0.8
        (1.0, 1.0, (1.2, 1.2), 450.0),  # 1 + 0.6 = 1.6 → clamped down to 1.5
        (1.0, 1.0, (1.2, 1.2, 1.2), 450.0),
        (0.5, 0.5, (-0.8, -0.8, 1.2), 300 * 0.4),  # 0.5 − 0.1 = 0.4
        (0.2, 0.2, (-0.8,), 90.0),  # 0.2 − 0.2 = 0 → 0.3
    ],
)
def test_ttl_formula_on_hand_computed_cases(
    confidence: float, certainty: float, feedback: tuple[float, ...], ttl_s: float
) -> None:
    assert policy().ttl_s(confidence, certainty, feedback) == pytest.approx(ttl_s, abs=1e-9)


def test_jitter_spreads_the_ttl_by_ten_percent_either_way() -> None:
    assert TtlPolicy(TtlConfig(), EdgeJitter(high=False)).ttl_s(1, 1) == pytest.approx(270.0)
    assert TtlPolicy(TtlConfig(), EdgeJitter(high=True)).ttl_s(1, 1) == pytest.approx(330.0)
    seen = [TtlPolicy(TtlConfig(), random.Random(seed)).ttl_s(1, 1) for seed in range(200)]
    assert 270.0 <= min(seen) < 280.0 and 320.0 < max(seen) <= 330.0


def test_the_store_ttl_cap_only_ever_shortens() -> None:
    assert policy().ttl_s(1, 1, cap_s=60.0) == 60.0
    assert policy().ttl_s(1, 1, cap_s=1000.0) == 300.0
    assert policy().ttl_s(1, 1, (1.2, 1.2), cap_s=400.0) == 400.0  # 450 capped


def test_only_the_last_three_signals_count() -> None:
    feedback: tuple[float, ...] = ()
    for signal in (1.2, -0.8, -0.8, 1.2):
        feedback = TtlPolicy.add_signal(feedback, signal)
    assert feedback == (-0.8, -0.8, 1.2)
    # 1 + 0.25·(−0.4) = 0.9: the first useful signal no longer counts.
    assert policy().ttl_s(1, 1, feedback) == pytest.approx(270.0)


def test_two_irrelevant_signals_evict_and_one_does_not() -> None:
    p = policy()
    assert not p.should_evict(())
    assert not p.should_evict((-0.8,))
    assert p.should_evict((-0.8, -0.8))  # −1.6, at the limit (floating point included)
    assert p.should_evict((-0.8, -0.8, -0.8))
    assert not p.should_evict((-0.8, -0.8, 1.2))
    assert not p.should_evict((-0.79, -0.8))
    assert p.should_evict((1.2, -0.8, -0.8)[-3:]) is False  # the useful one still counts
    assert p.should_evict(TtlPolicy.add_signal((1.2, -0.8, -0.8), -0.8))


@pytest.mark.parametrize(
    "signal,value",
    [("useful", 1.2), ("irrelevant", -0.8), (0.5, 0.5), (5, 1.2), (-3.0, -0.8), (0, 0.0)],
)
def test_signals_as_numbers(signal: str | float, value: float) -> None:
    assert signal_value(signal) == value


def test_a_non_finite_signal_is_a_broken_invariant() -> None:
    with pytest.raises(AssertionError):
        signal_value(math.nan)


# --- confidence and certainty from logprobs ------------------------------------------------


def chat_token(p: float, top: list[float]) -> dict[str, object]:
    return {
        "token": "t",
        "logprob": math.log(p),
        "top_logprobs": [{"token": f"a{i}", "logprob": math.log(q)} for i, q in enumerate(top)],
    }


def test_chat_logprobs_hand_computed() -> None:
    # Token 1: chosen p = 0.5, top-2 (0.5, 0.25), the remaining mass 0.25 is one more bucket:
    #   H1 = −(0.5 ln 0.5 + 0.25 ln 0.25 + 0.25 ln 0.25) = 1.5 ln 2.
    # Token 2: chosen p = 1, top (1.0, ~0): H2 = 0.
    # confidence = (0.5 + 1) / 2 = 0.75; certainty = 1 − (0.75 ln 2) / ln 3.
    logprobs = {"content": [chat_token(0.5, [0.5, 0.25]), chat_token(1.0, [1.0, 1e-300])]}
    figures = certainty_from_chat_logprobs(logprobs)
    assert figures.confidence == pytest.approx(0.75)
    assert figures.certainty == pytest.approx(1 - 0.75 * math.log(2) / math.log(3))
    assert figures.certainty == pytest.approx(0.526802, abs=1e-6)
    assert figures.tokens == 2


def test_a_uniform_distribution_has_no_certainty_and_a_sure_one_full_certainty() -> None:
    # k = 5, each of the five at 1/6 and 1/6 left over: H = ln 6 = Hmax.
    uniform = {"content": [chat_token(1 / 6, [1 / 6] * 5)] * 3}
    assert certainty_from_chat_logprobs(uniform).certainty == pytest.approx(0.0, abs=1e-12)
    assert certainty_from_chat_logprobs(uniform).confidence == pytest.approx(1 / 6)
    sure = {"content": [chat_token(1.0, [1.0, 1e-300, 1e-300, 1e-300, 1e-300])]}
    assert certainty_from_chat_logprobs(sure) == AnswerCertainty(1.0, 1.0, 1)


def test_hmax_follows_the_width_of_the_returned_distributions() -> None:
    # A client that asked for top_logprobs=1 itself: one alternative plus the rest bucket,
    # Hmax = ln 2; p = 0.5 gives H = ln 2, so no certainty at all (not 1 − ln 2 / ln 6).
    logprobs = {"content": [chat_token(0.5, [0.5])]}
    assert certainty_from_chat_logprobs(logprobs).certainty == pytest.approx(0.0, abs=1e-12)


def test_legacy_completion_logprobs_hand_computed() -> None:
    # token_logprobs (0.8, 0.6); top-2 maps {0.8, 0.2} and {0.6, 0.4}; nothing left over.
    logprobs = {
        "tokens": ["a", "b"],
        "token_logprobs": [math.log(0.8), math.log(0.6)],
        "top_logprobs": [
            {"a": math.log(0.8), "x": math.log(0.2)},
            {"b": math.log(0.6), "y": math.log(0.4)},
        ],
    }
    h1 = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    h2 = -(0.6 * math.log(0.6) + 0.4 * math.log(0.4))
    figures = certainty_from_text_logprobs(logprobs)
    assert figures.confidence == pytest.approx(0.7)
    assert figures.certainty == pytest.approx(1 - (h1 + h2) / 2 / math.log(3))
    assert figures.certainty == pytest.approx(0.465956, abs=1e-6)


def test_without_usable_logprobs_an_answer_counts_as_certain() -> None:
    assert certainty_from_chat_logprobs(None) == AnswerCertainty(1.0, 1.0, 0)
    assert certainty_from_chat_logprobs({"content": []}) == AnswerCertainty(1.0, 1.0, 0)
    assert certainty_from_chat_logprobs({"content": None, "refusal": None}).tokens == 0
    assert certainty_from_text_logprobs({"token_logprobs": [None]}) == AnswerCertainty()
    # Chosen-token logprobs without alternatives: confidence known, certainty 1.
    only_chosen = {"content": [{"token": "t", "logprob": math.log(0.4), "top_logprobs": []}]}
    assert certainty_from_chat_logprobs(only_chosen) == AnswerCertainty(pytest.approx(0.4), 1.0, 1)
    # An echoed prompt's first token has no logprob (null) and -inf is skipped.
    echoed = {"token_logprobs": [None, -math.inf, math.log(0.5)], "top_logprobs": None}
    assert certainty_from_text_logprobs(echoed).confidence == pytest.approx(0.5)
