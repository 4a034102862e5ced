"""Which of a search's nearest candidates answers the query: the thresholds, the meaning
guards and the neighbour-answer check, whatever index found the candidates (FAISS in the
replica, tiers/semantic/tier.py; or Redis's own vector index, tiers/semantic/redis_search.py).

A candidate answers only when its similarity reaches its effective threshold (the larger of the
global threshold and the entry's own floor, or its learned threshold where lower, see
tiers/policies/thresholds.py; or the relaxed threshold of a degraded lookup), the guards agree
that the two prompts ask the same thing, and no neighbour within `semantic.answer_margin` of it
asks the same question but was answered differently. In two-stage mode a candidate just under
its threshold is judged by the second model's similarity (tiers/policies/rescoring.py).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from core.pacing import Pacer
from core.recorder import CacheRecorder, GuardName
from core.semantic_config import SemanticConfig
from normalize.meaning.guards import GuardVerdict, MeaningGuard
from normalize.meaning.signature import Analysis
from tiers.policies.rescoring import RescoreBand
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.indexed import Indexed
from tiers.semantic.protocol import NearestNotes, RescoreVector, SemanticCandidate

# A search's candidates: the entries nearest the query, best first, each with its similarity
# on the common scale (tiers/policies/similarity_scale.py), fresh ones only.
Neighbours = list[tuple[Indexed, float]]


class CandidateVectors(Protocol):
    """Where a backend keeps its candidates' answer vectors and second-model prompt vectors
    (the FAISS tier's partition rows, tiers/semantic/holdings.py; the Redis index's records as
    its search returned them)."""

    def answer(self, item: Indexed) -> np.ndarray | None:
        """The embedding of `item`'s answer (None: not attached, or a tool call)."""

    def rescore(self, item: Indexed) -> np.ndarray | None:
        """Two-stage: `item`'s prompt by the second model (None: one stage, or none kept)."""


class CandidateJudge:
    def __init__(
        self,
        config: SemanticConfig,
        guard: MeaningGuard,
        thresholds: ThresholdController,
        recorder: CacheRecorder,
        rescoring: RescoreBand | None = None,
    ) -> None:
        self._config = config
        self._guard = guard
        self._thresholds = thresholds
        self._recorder = recorder
        self._rescoring = rescoring
        self.rescored = 0  # candidates judged by the second model's similarity

    async def choose(
        self,
        query: Analysis,
        live: Neighbours,
        vectors: CandidateVectors,
        pacer: Pacer,
        threshold_override: float | None = None,
        notes: NearestNotes | None = None,
        rescore: RescoreVector | None = None,
    ) -> tuple[Indexed, SemanticCandidate] | None:
        """The nearest candidate that passes its threshold and the guards, unless a neighbour
        contradicts it (then none); with the candidate it makes."""
        relaxed = threshold_override is not None
        for item, similarity in live:
            threshold = (
                threshold_override
                if threshold_override is not None
                else self._thresholds.effective(item.threshold, item.learned_threshold)
            )
            if rescore is not None and not relaxed:
                similarity = await self._rescored(item, similarity, threshold, vectors, rescore)
            if similarity < threshold:
                if notes is not None:
                    notes.saw(similarity, threshold, None)
                    if not relaxed:
                        await self._note_near_miss(query, item, similarity, threshold, notes, pacer)
                continue
            refused = await self._refusing_guard(query, item, pacer)
            if refused is not None:
                if notes is not None:
                    notes.saw(similarity, threshold, refused)
                continue
            # The nearest candidate that passes is the answer, unless a neighbour contradicts it.
            if await self.contradicted(query, item, similarity, live, vectors, pacer):
                self._recorder.guard_rejected(GuardName.ANSWERS)
                if notes is not None:
                    notes.decided(similarity, threshold, GuardName.ANSWERS)
                return None
            if notes is not None:
                notes.decided(similarity, threshold, None)
            learned = not relaxed and similarity < self._thresholds.effective(item.threshold)
            return item, SemanticCandidate(item.entry_id, similarity, learned)
        return None

    async def _rescored(
        self,
        item: Indexed,
        similarity: float,
        threshold: float,
        vectors: CandidateVectors,
        rescore: RescoreVector,
    ) -> float:
        """Two-stage: the second model's similarity for a candidate in the band under its
        threshold (tiers/policies/rescoring.py), else the first model's."""
        band = self._rescoring
        if band is None or not band.wants(similarity, threshold):
            return similarity
        cached = vectors.rescore(item)
        if cached is None:
            return similarity
        query = await rescore()
        if query is None:
            return similarity
        self.rescored += 1
        return band.similarity(query, cached)

    async def _note_near_miss(
        self,
        query: Analysis,
        item: Indexed,
        similarity: float,
        threshold: float,
        notes: NearestNotes,
        pacer: Pacer,
    ) -> None:
        """Note `item` when it may learn from this miss: with learning on, the first candidate
        within `learn_distance` under its threshold that the guards let through. Not counted as
        a guard rejection when they refuse: nothing was refused, it was no hit anyway."""
        thresholds = self._thresholds
        if notes.near_miss is not None or not thresholds.learning:
            return
        if (
            threshold - similarity <= thresholds.learning_reach
            and (await self._guards(query, item.analysis, pacer)).agree
        ):
            held = thresholds.held_back(item.threshold, item.learned_threshold, similarity)
            notes.missed_near(item.entry_id, similarity, item.language, held)

    async def _refusing_guard(
        self, query: Analysis, item: Indexed, pacer: Pacer
    ) -> GuardName | None:
        """The guard that finds the query asks something else than `item` (None: the same)."""
        verdict = await self._guards(query, item.analysis, pacer)
        if verdict.agree:
            return None
        guard = GuardName.of_reason(verdict.reason)
        self._recorder.guard_rejected(guard)
        return guard

    async def _guards(self, query: Analysis, cached: Analysis, pacer: Pacer) -> GuardVerdict:
        """The guards' verdict, each of their parts paced."""
        parts = self._guard.stepwise(query, cached)
        while True:
            await pacer.step()
            verdict = next(parts)
            if verdict is not None:
                return verdict

    async def contradicted(
        self,
        query: Analysis,
        best: Indexed,
        similarity: float,
        live: Neighbours,
        vectors: CandidateVectors,
        pacer: Pacer,
    ) -> bool:
        """Whether another neighbour within `answer_margin` of `similarity` asks the same
        question (by the guards) and has an answer that disagrees with `best`'s. Neighbours
        without an answer vector (not attached yet, tool calls) cannot contradict."""
        margin = self._config.answer_margin
        answer = vectors.answer(best) if margin > 0 else None
        if answer is None:
            return False
        for other, other_similarity in live:
            if other is best:
                continue
            if other_similarity < similarity - margin:
                break  # best first: the rest are further away still
            other_answer = vectors.answer(other)
            if other_answer is None:
                continue
            # Within the float16 rows' error bound of the float32 cosine (vector_rows.py).
            cosine = float(np.dot(answer, other_answer))
            if self._thresholds.answers_agree(cosine, best.language):
                continue
            if (await self._guards(query, other.analysis, pacer)).agree:
                return True
        return False
