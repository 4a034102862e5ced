"""Dynamic TTL policy (DESIGN.md, "Dynamic TTL"). Pure: no I/O; randomness is injected.

    ttl_s = base_ttl_s × clamp(w_c·confidence + w_e·certainty + w_f·feedback, lo, hi) × jitter

`confidence` is the mean probability of the chosen tokens; `certainty` is 1 − H/Hmax with H the
mean per-token entropy of the returned top-k distribution plus one bucket for the remaining
mass, Hmax = ln(k+1) with k the width of the distributions returned (Deja asks for
`upstream.top_logprobs`; a client asking for logprobs itself may choose another k); `feedback`
is the sum of the entry's last three signals. Without logprobs confidence = certainty = 1, so a
neutral entry gets exactly base_ttl_s before jitter. Jitter spreads the expiry of entries stored
together, so they are not all refetched at once.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.config import TtlConfig

USEFUL = 1.2
IRRELEVANT = -0.8
SIGNAL_MIN, SIGNAL_MAX = IRRELEVANT, USEFUL
FEEDBACK_WINDOW = 3


@dataclass(frozen=True, slots=True)
class AnswerCertainty:
    confidence: float = 1.0
    certainty: float = 1.0
    tokens: int = 0  # how many tokens the figures were computed over (0: no logprobs)


def certainty_from_chat_logprobs(logprobs: Any) -> AnswerCertainty:
    """From a chat choice's `logprobs` ({"content": [{logprob, top_logprobs: [...]}]})."""
    if not isinstance(logprobs, dict):
        return AnswerCertainty()
    tokens = logprobs.get("content") or []
    chosen = [t.get("logprob") for t in tokens if isinstance(t, dict)]
    tops = [
        [a.get("logprob") for a in t.get("top_logprobs") or []]
        for t in tokens
        if isinstance(t, dict)
    ]
    return _certainty(chosen, tops)


def certainty_from_text_logprobs(logprobs: Any) -> AnswerCertainty:
    """From a legacy completion choice's `logprobs` (token_logprobs, top_logprobs: [{tok: lp}])."""
    if not isinstance(logprobs, dict):
        return AnswerCertainty()
    chosen = list(logprobs.get("token_logprobs") or [])
    tops = [list((t or {}).values()) for t in logprobs.get("top_logprobs") or []]
    return _certainty(chosen, tops)


def _certainty(chosen: Sequence[Any], tops: Sequence[Sequence[Any]]) -> AnswerCertainty:
    probs = [math.exp(lp) for lp in chosen if isinstance(lp, int | float) and math.isfinite(lp)]
    if not probs:
        return AnswerCertainty()
    confidence = sum(probs) / len(probs)
    entropies = [_entropy(top) for top in tops if top]
    if not entropies:
        return AnswerCertainty(confidence=_unit(confidence), certainty=1.0, tokens=len(probs))
    # k is what was returned, not what Deja would ask for: a client that asked for logprobs
    # itself may have chosen another top_logprobs, and ln(k+1) must match the distributions.
    h_max = math.log(max(len(top) for top in tops) + 1)
    certainty = 1.0 - (sum(entropies) / len(entropies)) / h_max
    return AnswerCertainty(
        confidence=_unit(confidence), certainty=_unit(certainty), tokens=len(probs)
    )


def _entropy(top_logprobs: Sequence[Any]) -> float:
    ps = [math.exp(lp) for lp in top_logprobs if isinstance(lp, int | float) and math.isfinite(lp)]
    rest = max(0.0, 1.0 - sum(ps))
    return -sum(p * math.log(p) for p in [*ps, rest] if p > 0.0)


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x))


def signal_value(signal: str | float) -> float:
    """A feedback signal as a number: useful +1.2, irrelevant −0.8, numbers clamped to those."""
    if signal == "useful":
        return USEFUL
    if signal == "irrelevant":
        return IRRELEVANT
    assert isinstance(signal, int | float) and math.isfinite(signal), f"bad signal {signal!r}"
    return min(SIGNAL_MAX, max(SIGNAL_MIN, float(signal)))


class TtlPolicy:
    def __init__(self, config: TtlConfig, rng: random.Random | None = None) -> None:
        self._config = config
        self._rng = rng or random.Random()

    @property
    def base_ttl_s(self) -> float:
        return self._config.base_ttl_s

    def factor(self, confidence: float, certainty: float, feedback: Sequence[float]) -> float:
        c = self._config
        raw = c.w_confidence * confidence + c.w_certainty * certainty + c.w_feedback * sum(feedback)
        return min(c.factor_max, max(c.factor_min, raw))

    def ttl_s(
        self,
        confidence: float,
        certainty: float,
        feedback: Sequence[float] = (),
        cap_s: float | None = None,
    ) -> float:
        c = self._config
        jitter = self._rng.uniform(c.jitter_min, c.jitter_max)
        ttl = c.base_ttl_s * self.factor(confidence, certainty, feedback) * jitter
        return ttl if cap_s is None else min(ttl, cap_s)

    @staticmethod
    def add_signal(feedback: Sequence[float], signal: float) -> tuple[float, ...]:
        """The entry's feedback after `signal`: only the last three signals count."""
        return (*feedback, signal)[-FEEDBACK_WINDOW:]

    def should_evict(self, feedback: Sequence[float]) -> bool:
        return sum(feedback) <= self._config.evict_feedback_sum + 1e-9
