"""Similarity thresholds that follow evidence, and an honest estimate of the false-hit rate.

Evidence comes from verified semantic hits (a sampled share is also asked upstream and the two
answers compared) and from negative user feedback on semantic hits (complaints, which move only
the entry's own floor). Two things move with it:

* The global threshold T (starting at `semantic.threshold`). Each disagreement raises it by
  `up`, each agreement lowers it by `down = up · r/(1−r)`, with r a little under the target
  false-hit rate. This is a Robbins–Monro step: the expected move is zero exactly where the
  verified false-hit rate is r, so T settles where the rate is under the target, rising fast
  after false hits and giving hit rate back slowly. While the last 200 verifications show the
  rate over the target (their 95 % interval lies above it), a disagreement steps T up by their
  rate over r steps (at most 4): a threshold that starts far too loose, or a workload that
  changes under it, is corrected in hundreds of verifications instead of thousands. Near the
  aim this almost never fires (at a true 0.6 %, five wrong of 200 happen in under 1 % of
  windows). Evidence of a rate below r never comes that fast (a few hundred verifications cannot
  tell 0.3 % from 0.7 %), so the way down keeps its small steps.
* Each entry's own floor. A disagreement at similarity s puts the entry's floor at s + margin,
  so the same mistake is not made twice; an agreement lowers the floor by `lower_step`.

A candidate's effective threshold is max(T, its floor), clamped to [threshold_min,
threshold_max]. Entries start with no floor of their own (floor = threshold_min).

* Each entry's learned threshold (none at first). A miss whose nearest guard-passing entry fell
  within `learn_distance` under its threshold went upstream anyway; when the fresh answer agrees
  with that entry's, the pair meant the same, so the entry's learned threshold steps toward the
  similarity seen, by at most `learn_step`, never below T − learn_distance nor threshold_min. A
  disagreement (there, or in a verification of a hit it served) drops it at once. Where set, the
  effective threshold is the smaller of the above and the learned one. This evidence is no
  uniform sample of hits, so it moves neither T nor the estimate; hits served through a learned
  threshold get an estimate of their own (`learned_hits`, a `HitSwitch`), sampled at a higher
  share, and are served only while that estimate allows. While they are off, a lookup that
  only a learned threshold would have let through is a near-miss held back: it goes upstream,
  and its fresh answer against the entry's is a sample of exactly the hits held back, which
  feeds that estimate and can turn them on again.

`FalseHitEstimator` keeps the verified counts and gives the rate with a Wilson 95% interval.
Only verifications feed it (and the global threshold): they are a uniform random sample of
semantic hits; complaints are not (nobody reports the hits that were right).

`HitSwitch` keeps the estimate of one kind of hit that must not move T, and whether that kind is
served: off while its estimate is clearly over the target. Lemma-key hits have one (they have no
similarity), and so do hits through learned thresholds.
Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from core.semantic_config import VerifyConfig
from tiers.policies.similarity_scale import SimilarityScale

Z_95 = 1.959964
# The controller aims this far under the target, so noise keeps the true rate below it.
_AIM = 0.7
_UP_STEP = 0.01
# The last verifications that tell a threshold clearly too loose, and how many are needed first.
_RECENT = 200
_RECENT_MIN = 100
_MAX_BOOST = 4.0


@dataclass(frozen=True, slots=True)
class RateEstimate:
    verified: int
    wrong: int
    rate: float
    low: float
    high: float


def wilson_interval(wrong: int, total: int, z: float = Z_95) -> tuple[float, float]:
    if total == 0:
        return 0.0, 1.0
    p = wrong / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


class FalseHitEstimator:
    """Wrong hits / verified semantic hits, with its 95% interval."""

    def __init__(self) -> None:
        self.verified = 0
        self.wrong = 0

    def record(self, agreed: bool) -> None:
        self.verified += 1
        self.wrong += 0 if agreed else 1

    def estimate(self) -> RateEstimate:
        low, high = wilson_interval(self.wrong, self.verified)
        rate = self.wrong / self.verified if self.verified else 0.0
        return RateEstimate(self.verified, self.wrong, rate, low, high)


class ThresholdController:
    def __init__(
        self, config: VerifyConfig, initial: float, scale: SimilarityScale | None = None
    ) -> None:
        self._config = config
        # Every level here is on the reference model's scale; other languages' cosines are
        # mapped onto it (tiers/policies/similarity_scale.py).
        self._scale = scale or SimilarityScale(initial)
        self._global = self._clamp(initial)
        self._aim = config.target_false_hit_rate * _AIM
        self._up = _UP_STEP
        self._down = _UP_STEP * self._aim / (1 - self._aim)
        self._recent: deque[bool] = deque(maxlen=_RECENT)  # True: a disagreement
        self.estimator = FalseHitEstimator()
        # Hits served only through a learned threshold: never in `estimator` (see the top).
        self.learned_hits = HitSwitch(config)
        self.complaints = 0
        # Near-misses whose fresh answer agreed with their neighbour's, and those that did not.
        self.near_misses_agreed = 0
        self.near_misses_disagreed = 0

    @property
    def global_threshold(self) -> float:
        return self._global

    @property
    def neutral_floor(self) -> float:
        """The floor of an entry without evidence of its own."""
        return self._config.threshold_min

    def similarity(self, language: str, cosine: float) -> float:
        """A cosine of `language`'s embedding model on the scale every level here uses."""
        return self._scale.common(language, cosine)

    def answers_agree(self, cosine: float, language: str = "en") -> bool:
        """Whether two answers whose embeddings (by `language`'s model) have this cosine say
        the same thing."""
        return self._scale.common(language, cosine) >= self._config.answer_agreement

    @property
    def learning(self) -> bool:
        """Whether near-misses may teach entries a learned threshold (`verify.learn_distance`)."""
        return self._config.learn_distance > 0

    @property
    def learning_reach(self) -> float:
        """How far under its threshold a near-miss may fall and still teach its entry."""
        return self._config.learn_distance

    def effective(self, entry_floor: float, learned: float | None = None) -> float:
        """The similarity a candidate needs: max(T, its floor), or its learned threshold where
        that is lower (kept within T − learn_distance, since T moves after it was learned)
        and hits through learned thresholds are served (`learned_hits`)."""
        usual = self._clamp(max(self._global, entry_floor))
        if learned is None or not self.learned_hits.serving:
            return usual
        return min(usual, max(learned, self._lowest_learned()))

    def held_back(self, entry_floor: float, learned: float | None, similarity: float) -> bool:
        """Whether a candidate at `similarity` would hit through its learned threshold, were
        hits through learned thresholds served (they are not now: `learned_hits` is off)."""
        if learned is None or self.learned_hits.serving:
            return False
        usual = self._clamp(max(self._global, entry_floor))
        return similarity >= min(usual, max(learned, self._lowest_learned()))

    def learned_after(self, learned: float | None, similarity: float, agreed: bool) -> float | None:
        """An entry's learned threshold after a near-miss at `similarity` whose fresh answer
        agreed with the entry's, or not (None: no learned threshold, the usual one applies)."""
        if not agreed:
            return None
        start = self._global if learned is None else min(learned, self._global)
        lowered = max(start - self._config.learn_step, similarity, self._lowest_learned())
        return lowered if lowered < self._global else learned

    def _lowest_learned(self) -> float:
        return max(self._config.threshold_min, self._global - self._config.learn_distance)

    def record_complaint(self) -> None:
        """Negative feedback on a semantic hit. It raises that entry's floor (`floor_after`)
        but moves neither the global threshold nor the estimate: complaints are no random
        sample, and any client key may send them, so one tenant could otherwise push the
        threshold every tenant shares to its maximum with a handful of requests."""
        self.complaints += 1

    def record_near_miss(self, agreed: bool) -> None:
        """A near-miss's answer compared with its neighbour's: counted, never in the estimate
        or T (near-misses are no sample of hits); `learned_after` moves the entry."""
        if agreed:
            self.near_misses_agreed += 1
        else:
            self.near_misses_disagreed += 1

    def record(self, agreed: bool) -> None:
        """One verification outcome: the estimate and the global threshold."""
        self.estimator.record(agreed)
        self._recent.append(not agreed)
        if agreed:
            self._global = self._clamp(self._global - self._down)
        else:
            self._global = self._clamp(self._global + self._up * self.boost())

    def boost(self) -> float:
        """How many steps a disagreement moves T now: 1, or, while the last verifications put
        the rate over the target, their rate over the aim (at most `_MAX_BOOST`)."""
        n = len(self._recent)
        if n < _RECENT_MIN:
            return 1.0
        wrong = sum(self._recent)  # at most 200, and only on a disagreement
        low, _ = wilson_interval(wrong, n)
        if low <= self._config.target_false_hit_rate:
            return 1.0
        return min(_MAX_BOOST, wrong / n / self._aim)

    def floor_after(self, floor: float, similarity: float, agreed: bool) -> float:
        """An entry's new floor after evidence at `similarity`."""
        if agreed:
            return max(self._config.threshold_min, floor - self._config.lower_step)
        return self._clamp(max(floor, similarity + self._config.raise_margin))

    def _clamp(self, value: float) -> float:
        return min(self._config.threshold_max, max(self._config.threshold_min, value))


class HitSwitch:
    """Whether one kind of hit is served (lemma-key hits; hits through learned thresholds),
    decided by its own verified false-hit rate.

    These verifications feed this estimate only, never the semantic threshold: lemma hits have
    no similarity, and learned hits are no uniform sample of semantic hits. Off once the
    estimate's 95% interval lies above `verify.target_false_hit_rate` (lemma: the lookup skips
    the lemma key and goes on to the semantic tier; learned: the usual threshold applies); on
    again once the rate itself is back at or under the target. The gap between the two is
    hysteresis: a rate near the target does not flip the switch at every verification. While
    off, the matches held back still feed the estimate (lemma: sampled for verification, see
    proxy/answering/verifier.py; learned: as near-misses, proxy/answering/miss_learning.py), or
    nothing could ever bring them back."""

    def __init__(self, config: VerifyConfig) -> None:
        self._target = config.target_false_hit_rate
        self._serving = True
        self.estimator = FalseHitEstimator()
        # Lemma hits served before their answer check could run, and refused by it afterwards.
        # Not in the estimate: those are no random sample of lemma hits (like complaints).
        self.refused_after_serving = 0

    @property
    def serving(self) -> bool:
        return self._serving

    def record(self, agreed: bool) -> None:
        """One verification of a match of this kind (served, or held back while off)."""
        self.estimator.record(agreed)
        estimate = self.estimator.estimate()
        if self._serving and estimate.low > self._target:
            self._serving = False
        elif not self._serving and estimate.rate <= self._target:
            self._serving = True

    def record_refused_after_serving(self) -> None:
        self.refused_after_serving += 1
