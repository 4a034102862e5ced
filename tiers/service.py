"""The lookup chain, fill-back and write-through over the tiers.

    lookup:  LRU-K ─exact─▶ Redis ─exact─▶ LRU-K ─lemma─▶ Redis ─lemma─▶ semantic ─▶ miss
             (a hit in a lower tier is copied into the tiers above it: fill-back; an
             in-process first tier is asked synchronously, so its hits cost no coroutines;
             the lemma steps are skipped while lemma hits are off, `HitSwitch`)
    store:   the in-process tier and the semantic index, the answer's embedding, the other
             key-value tiers and the replication log, each once; the entry it supersedes (same
             exact key) is deleted everywhere

A tier that is unreachable is skipped (and counted); it never fails a request. Entries that
are expired but within their grace period are not hits: they are returned as `stale`, for the
degraded-answer path to use when the upstream fails.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import numpy as np

from core.clock import Clock
from core.errors import TierUnavailable
from core.pacing import Pacer, Unpaced
from core.recorder import CacheRecorder
from core.semantic_config import VerifyConfig
from normalize.keys.request import CacheRequest
from normalize.prompt_features import PromptFeatures
from tiers.base import (
    CacheTier,
    Entry,
    InProcessTier,
    Invalidation,
    Lookup,
    MatchKind,
    TierName,
)
from tiers.lookup_outcome import LookupOutcome, lookup_outcome
from tiers.policies.thresholds import HitSwitch
from tiers.replication import EventKind, NoReplication, Replication, ReplicationEvent
from tiers.semantic.protocol import (
    EveryPartitionHeld,
    NearestNotes,
    NullSemanticIndex,
    PartitionDemand,
    SemanticIndex,
)

_log = logging.getLogger("deja.cache")

# Computes an answer's embedding (None: nothing to embed, or the check is off).
AnswerVector = Callable[[], Awaitable[bytes | None]]


class CacheService:
    def __init__(
        self,
        tiers: Sequence[CacheTier],
        clock: Clock,
        recorder: CacheRecorder,
        semantic: SemanticIndex | None = None,
        replication: Replication | None = None,
        lemma_hits: HitSwitch | None = None,
        learning: bool = False,
        partitions: PartitionDemand | None = None,
    ) -> None:
        self._tiers = list(tiers)
        first = self._tiers[0] if self._tiers else None
        self._memory = first if isinstance(first, InProcessTier) else None
        self._clock = clock
        self._recorder = recorder
        self._semantic: SemanticIndex = semantic or NullSemanticIndex()
        # Where every change is told to other replicas (built before the service, over the same
        # semantic index); none without Redis.
        self._replication: Replication = replication or NoReplication()
        # Whether lemma-key matches are served (fed by the verifier); without one, always.
        self._lemma_hits = lemma_hits or HitSwitch(VerifyConfig())
        # Near-misses are noted for learning (`verify.learn_distance` > 0): each semantic
        # search then keeps notes, and checks the guards of one candidate under its threshold.
        self._learning = learning
        # Told of every lookup's and store's partition, so that the semantic index holds it.
        self._partitions: PartitionDemand = partitions or EveryPartitionHeld()

    async def _publish(self, event: ReplicationEvent) -> None:
        try:
            await self._replication.publish(event)
        except TierUnavailable:
            self._recorder.tier_error("replication")

    @property
    def semantic(self) -> SemanticIndex:
        return self._semantic

    def answer_vector(self, entry_id: str) -> np.ndarray | None:
        """The entry's answer embedding as the semantic tier holds it (None when it has none:
        not attached yet, a tool-call answer, or the semantic tier is off)."""
        return self._semantic.answer_vector(entry_id)

    async def lookup(
        self,
        request: CacheRequest,
        features: PromptFeatures,
        max_age_s: float | None = None,
        pacer: Pacer | None = None,
        explain: bool = False,
        explain_misses: bool = False,
    ) -> LookupOutcome:
        """LRU-K → Redis by exact key, then by lemma key, then the semantic index. Each step
        past the exact tiers first awaits `pacer` (the caller's lookup lane, core/pacing.py);
        without one, nothing waits. With `explain`, the outcome says why it hit or missed
        (without, nothing is noted: an exact hit costs no extra coroutine). With
        `explain_misses`, only a miss's outcome says why (the dashboard's recent misses): a hit
        pays nothing for it."""
        pacer = pacer or Unpaced()
        # Any lookup, exact hits too, makes the partition's vectors load (in the background).
        self._partitions.want(request.partition)
        now = self._clock.time()
        hit, stale = self._memory_lookup(
            request, request.exact_key, MatchKind.EXACT, now, max_age_s
        )
        if hit is not None:
            return lookup_outcome(hit, stale, features, None, explain)

        def explained(hit: Lookup | None) -> bool:
            return explain or (explain_misses and hit is None)

        hit, stale = await self._kv_lookup(
            request, request.exact_key, MatchKind.EXACT, now, max_age_s, stale
        )
        if hit is not None or not features.semantic_allowed():
            return lookup_outcome(hit, stale, features, None, explained(hit))
        # What the semantic search notes about its nearest candidate, only past the exact
        # tiers, and only for a caller that asked why or for learning from misses.
        notes = NearestNotes() if explain or explain_misses or self._learning else None
        analysis = await features.analysis()
        # The features of a whole batch of lookups arrive in one loop iteration; what each
        # does with them waits for a turn of its own.
        await pacer.step()
        held_back = None
        if analysis is not None and analysis.lemma_key is not None:
            key = analysis.lemma_key
            hit, lemma_stale = self._memory_lookup(request, key, MatchKind.LEMMA, now, max_age_s)
            if hit is None:
                hit, lemma_stale = await self._kv_lookup(
                    request, key, MatchKind.LEMMA, now, max_age_s, lemma_stale
                )
            stale = stale or lemma_stale
            if hit is not None and not self._lemma_hits.serving:
                held_back = hit
            elif hit is not None:
                # The answer check with what is computed already: a lemma hit never waits for
                # the prompt's embedding (it is not ready: the check runs after the response).
                vector = features.vector_if_ready()
                if vector is None:
                    return lookup_outcome(
                        hit, stale, features, notes, explained(hit), answer_check_due=True
                    )
                if not await self._semantic.contradicts(
                    request.partition, vector, analysis.analysis, hit.entry.entry_id, pacer=pacer
                ):
                    return lookup_outcome(hit, stale, features, notes, explained(hit))
        hit = await self._semantic_lookup(request, features, now, max_age_s, pacer, notes)
        return lookup_outcome(
            hit, stale, features, notes, explained(hit), held_back_lemma=held_back
        )

    def _memory_lookup(
        self, request: CacheRequest, key: str, match: MatchKind, now: float, max_age_s: float | None
    ) -> tuple[Lookup | None, Lookup | None]:
        """The in-process tier's (hit, stale), asked without an await."""
        memory = self._memory
        if memory is None:
            return None, None
        entry = memory.get_now(key)
        if entry is None or not _found_by(entry, request, key, match):
            return None, None
        if self._acceptable(entry, now, max_age_s):
            return Lookup(entry, memory.name, match), None
        return None, (None if entry.is_gone(now) else Lookup(entry, memory.name, match))

    async def _kv_lookup(
        self,
        request: CacheRequest,
        key: str,
        match: MatchKind,
        now: float,
        max_age_s: float | None,
        stale: Lookup | None,
    ) -> tuple[Lookup | None, Lookup | None]:
        """The remaining tiers, in order, after `_memory_lookup` (which found `stale`)."""
        start = 0 if self._memory is None else 1
        for depth, tier in enumerate(self._tiers[start:], start):
            try:
                entry = await tier.get(key)
            except TierUnavailable:
                self._recorder.tier_error(tier.name)
                continue
            if entry is None or not _found_by(entry, request, key, match):
                continue
            if self._acceptable(entry, now, max_age_s):
                if depth:
                    await self._fill_back(entry, self._tiers[:depth])
                return Lookup(entry, tier.name, match), stale
            if stale is None and not entry.is_gone(now):
                stale = Lookup(entry, tier.name, match)
        return None, stale

    async def _semantic_lookup(
        self,
        request: CacheRequest,
        features: PromptFeatures,
        now: float,
        max_age_s: float | None,
        pacer: Pacer,
        notes: NearestNotes | None,
    ) -> Lookup | None:
        analysis = await features.analysis()  # starts the embedding too, if it has not started
        vector = await features.vector()
        if vector is None or analysis is None:
            return None
        candidates = await self._semantic.search(
            request.partition,
            vector,
            analysis.analysis,
            pacer=pacer,
            notes=notes,
            rescore=features.rescore_vector,
        )
        for candidate in candidates:
            entry = await self.get_entry(candidate.entry_id)
            if entry is None or entry.partition != request.partition:
                continue
            if self._acceptable(entry, now, max_age_s):
                return Lookup(
                    entry,
                    TierName.SEMANTIC,
                    MatchKind.SEMANTIC,
                    candidate.similarity,
                    candidate.learned,
                )
        return None

    async def contradicted(
        self, request: CacheRequest, features: PromptFeatures, entry: Entry
    ) -> bool:
        """The semantic tier's answer check for a lemma-key match (the same lemma skeleton does
        not make near-identical questions answered differently any safer to serve), awaiting
        the prompt's embedding: for after the response, never on a hit's path."""
        analysis = await features.analysis()
        vector = await features.vector()
        if vector is None or analysis is None:
            return False
        return await self._semantic.contradicts(
            request.partition, vector, analysis.analysis, entry.entry_id
        )

    async def drop_lemma_key(self, entry_id: str) -> bool:
        """Stop finding the entry by its lemma key; its exact key and its place in the semantic
        index (with the guards and the answer check a semantic hit gets) stay. Redis keeps the
        lemma index key until the entry expires, pointing at a record that no longer claims it,
        which a lookup skips (`_found_by`)."""
        entry = await self.get_entry(entry_id)
        if entry is None or entry.lemma_key is None:
            return False
        return await self.replace(replace(entry, lemma_key=None))

    async def neighbour(
        self, request: CacheRequest, features: PromptFeatures, threshold: float
    ) -> Lookup | None:
        """The nearest entry at a relaxed `threshold` (guards still apply), fresh or within its
        grace period: a degraded answer for when the upstream cannot give a real one."""
        analysis = await features.analysis()  # starts the embedding too, if it has not started
        vector = await features.vector()
        if vector is None or analysis is None:
            return None
        candidates = await self._semantic.search(
            request.partition, vector, analysis.analysis, threshold_override=threshold
        )
        for candidate in candidates:
            entry = await self.get_entry(candidate.entry_id)
            if entry is not None and entry.partition == request.partition:
                return Lookup(entry, TierName.SEMANTIC, MatchKind.SEMANTIC, candidate.similarity)
        return None

    @staticmethod
    def _acceptable(entry: Entry, now: float, max_age_s: float | None) -> bool:
        return entry.is_fresh(now) and (max_age_s is None or entry.age_s(now) <= max_age_s)

    async def _fill_back(self, entry: Entry, tiers: Sequence[CacheTier]) -> None:
        for tier in tiers:
            try:
                await tier.put(entry)
            except TierUnavailable:
                self._recorder.tier_error(tier.name)

    async def store(self, entry: Entry, answer_vector: AnswerVector | None = None) -> None:
        """Write-through to every tier, once; an unreachable tier is skipped. An entry that held
        the same exact key until now (a refreshed answer, `Cache-Control: no-cache`, warm-up)
        is retired everywhere: its record, its vector, and the other replicas' local copies,
        which would otherwise keep serving the old answer until it expired.

        `answer_vector` computes the answer's embedding. What this process holds is written
        before it is awaited, so that a client repeating its question, or a paraphrase of it,
        right after the answer finds it: the in-process tier (which holds no vectors) and the
        semantic index (which takes the answer's embedding on the entry it holds once it is
        in). The shared tiers and the one replication event wait for it, so the entry is
        written there once, with it, and other replicas load it whole."""
        superseded: list[str] = []
        local = self._tiers[:1] if self._memory is not None else []
        await self._put(entry, local, superseded)
        self._partitions.want(entry.partition)
        await self._semantic.add(entry)
        if answer_vector is not None:
            vector = await answer_vector()
            if vector is not None:
                entry = replace(entry, answer_vector=vector)
                await self._semantic.update(entry)
        await self._put(entry, self._tiers[len(local) :], superseded)
        self._recorder.stored()
        await self._publish(ReplicationEvent(EventKind.ADD, entry.entry_id))
        for entry_id in superseded:
            await self.delete(entry_id)

    async def _put(self, entry: Entry, tiers: Sequence[CacheTier], superseded: list[str]) -> None:
        """Write `entry` to `tiers`, noting in `superseded` the entries it displaced."""
        for tier in tiers:
            try:
                previous = await tier.put(entry)
            except TierUnavailable:
                self._recorder.tier_error(tier.name)
                continue
            if previous is not None and previous not in superseded:
                superseded.append(previous)

    # --- by id (admin, feedback) -----------------------------------------------------------

    async def get_entry(self, entry_id: str) -> Entry | None:
        """The entry from the nearest tier that has it (gone entries excluded)."""
        now = self._clock.time()
        for depth, tier in enumerate(self._tiers):
            try:
                entry = await tier.get_by_id(entry_id)
            except TierUnavailable:
                self._recorder.tier_error(tier.name)
                continue
            if entry is not None and not entry.is_gone(now):
                await self._fill_back(entry, self._tiers[:depth])
                return entry
        return None

    async def matching(self, selector: Invalidation, limit: int) -> tuple[list[Entry], int]:
        """The newest `limit` entries `selector` matches across the tiers (each once, as the
        nearest tier holds it, gone entries excluded), and how many match in all."""
        assert limit >= 0, "a listing's limit is not negative"
        now = self._clock.time()
        found: dict[str, Entry] = {}
        for tier in self._tiers:
            try:
                entries = await tier.matching(selector)
            except TierUnavailable:
                self._recorder.tier_error(tier.name)
                continue
            for entry in entries:
                if not entry.is_gone(now):
                    found.setdefault(entry.entry_id, entry)
        newest = sorted(found.values(), key=lambda e: (-e.stored_at, e.entry_id))
        return newest[:limit], len(newest)

    async def replace(self, entry: Entry) -> bool:
        """Overwrite an entry's record (new TTL, threshold, feedback) wherever it is stored."""
        replaced = False
        for tier in self._tiers:
            try:
                replaced = await tier.replace(entry) or replaced
            except TierUnavailable:
                self._recorder.tier_error(tier.name)
        await self._semantic.update(entry)
        await self._publish(ReplicationEvent(EventKind.UPDATE, entry.entry_id))
        return replaced

    async def delete(self, entry_id: str) -> bool:
        deleted = False
        for tier in self._tiers:
            try:
                deleted = await tier.delete(entry_id) or deleted
            except TierUnavailable:
                self._recorder.tier_error(tier.name)
        deleted = await self._semantic.remove(entry_id) or deleted
        await self._publish(ReplicationEvent(EventKind.DELETE, entry_id))
        return deleted

    async def invalidate(self, selector: Invalidation) -> int:
        """Delete matching entries from every tier; returns the most any tier deleted."""
        counts = [0]
        for tier in self._tiers:
            try:
                counts.append(await tier.invalidate(selector))
            except TierUnavailable:
                self._recorder.tier_error(tier.name)
        counts.append(await self._semantic.invalidate(selector))
        await self._publish(ReplicationEvent(EventKind.INVALIDATE, selector=selector))
        return max(counts)


def _found_by(entry: Entry, request: CacheRequest, key: str, match: MatchKind) -> bool:
    """Whether an entry a key led to is this request's: its partition, and, for a lemma key,
    an entry that still claims that key (`CacheService.drop_lemma_key`)."""
    if entry.partition != request.partition:
        return False
    return match is not MatchKind.LEMMA or entry.lemma_key == key
