"""What a lookup found: the hit, a stale candidate, and what the caller asked to know (why it
hit or missed, a lemma hit's answer check still due, a held-back lemma match, a near-miss to
learn from). `CacheService.lookup` builds it here, the callers read it."""

from __future__ import annotations

from dataclasses import dataclass

from core.recorder import GuardName
from normalize.prompt_features import PromptFeatures, SemanticSkip
from tiers.base import Lookup, LookupExplanation, MatchKind, NearMiss
from tiers.semantic.protocol import NearestNotes


@dataclass(frozen=True, slots=True)
class LookupOutcome:
    hit: Lookup | None = None
    # The best entry that was found but is not fresh enough to be a hit (expired within its
    # grace period, or older than the request's max-age): material for a degraded answer.
    stale: Lookup | None = None
    # Why it hit or missed, when the caller asked (X-Deja-Explain); None otherwise.
    explanation: LookupExplanation | None = None
    # A lemma hit served before its answer check: the prompt's embedding was not computed
    # yet, and no hit waits for one. The caller runs the check after the response
    # (`contradicted`, then `drop_lemma_key`).
    answer_check_due: bool = False
    # A lemma-key match not served because lemma hits are off: the caller may still verify it,
    # so that the estimate which turned them off can turn them on again.
    held_back_lemma: Lookup | None = None
    # With learning on, a miss's near-miss: its entry may learn from the fresh answer.
    near_miss: NearMiss | None = None


def lookup_outcome(
    hit: Lookup | None,
    stale: Lookup | None,
    features: PromptFeatures,
    notes: NearestNotes | None,
    explain: bool,
    answer_check_due: bool = False,
    held_back_lemma: Lookup | None = None,
) -> LookupOutcome:
    """What `lookup` returns: with its explanation when it was asked for one, and a miss's
    near-miss when learning is on (both from `notes`, which a lookup settled by the exact
    tiers has none of)."""
    explanation = _explanation(hit, features, notes or NearestNotes()) if explain else None
    near_miss = None if notes is None or hit is not None else notes.near_miss
    return LookupOutcome(hit, stale, explanation, answer_check_due, held_back_lemma, near_miss)


def _explanation(
    hit: Lookup | None, features: PromptFeatures, notes: NearestNotes
) -> LookupExplanation:
    """What `lookup` tells a client that asked why: an exact or lemma hit says only how it was
    served; anything else, what the semantic search noted about its nearest candidate, or,
    when it compared none, why the prompt was never looked at loosely."""
    if hit is not None and hit.match is not MatchKind.SEMANTIC:
        return LookupExplanation(served=hit.match)
    refused: GuardName | SemanticSkip | None = notes.refused
    if refused is None and notes.similarity is None:
        refused = features.skip_reason()
    served = None if hit is None else hit.match
    return LookupExplanation(notes.similarity, notes.threshold, refused, served)
