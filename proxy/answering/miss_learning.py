"""Learning from misses: a near-miss's fresh answer as evidence about its neighbour.

A miss whose nearest guard-passing candidate fell just under its threshold (within
`verify.learn_distance`, noted by the semantic search as a `NearMiss`) went upstream anyway.
When its fresh answer is stored, the answer store hands its embedding here: agreeing with the
neighbour's answer (`ThresholdController.answers_agree`, the check verification uses) is free
evidence that the pair means the same, so the neighbour's learned threshold steps toward the
similarity seen; disagreeing drops it at once (tiers/policies/thresholds.py `learned_after`).

Only later lookups see the change: the request that taught it was already answered upstream.
None of this moves the global threshold or the global false-hit estimate, which rest on a
uniform sample of hits; the hits served through a learned threshold are verified at a share and
into an estimate of their own (proxy/answering/verifier.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tiers.base import NearMiss
from tiers.policies.thresholds import ThresholdController
from tiers.service import CacheService


class MissLearner:
    def __init__(self, service: CacheService, thresholds: ThresholdController) -> None:
        self._service = service
        self._thresholds = thresholds

    async def learn(self, near_miss: NearMiss, fresh_answer_vector: bytes | None) -> None:
        """Move the neighbour's learned threshold by what the fresh answer says. Without both
        answers' embeddings (a tool-call answer, one not attached yet) there is no evidence."""
        cached = self._service.answer_vector(near_miss.entry_id)
        if fresh_answer_vector is None or cached is None:
            return
        fresh = np.frombuffer(fresh_answer_vector, dtype=np.float32)
        if fresh.shape != cached.shape:
            return  # another embedding model's vector: not comparable
        agreed = self._thresholds.answers_agree(float(np.dot(fresh, cached)), near_miss.language)
        self._thresholds.record_near_miss(agreed)
        if near_miss.held_back:
            # A hit held back while learned hits are off: a sample of exactly those hits.
            self._thresholds.learned_hits.record(agreed)
        await self.apply(near_miss.entry_id, near_miss.similarity, agreed)

    async def apply(self, entry_id: str, similarity: float, agreed: bool) -> None:
        """The entry's learned threshold after evidence at `similarity`, written wherever the
        entry is stored (and replicated) when it changed."""
        entry = await self._service.get_entry(entry_id)
        if entry is None:
            return
        learned = self._thresholds.learned_after(entry.learned_threshold, similarity, agreed)
        if learned != entry.learned_threshold:
            await self._service.replace(replace(entry, learned_threshold=learned))
