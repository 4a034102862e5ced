"""The similarity tier: one FAISS index per partition and language, meaning guards on every
candidate.

A candidate answers the query only when its similarity (its cosine, on the common scale of
tiers/policies/similarity_scale.py) reaches its effective threshold (the larger of the global
threshold and the entry's own floor, or its learned threshold where lower, see
tiers/policies/thresholds.py; or the relaxed threshold of a degraded lookup) and the meaning
guards agree that the two prompts ask the same thing. A query searches only the index of its
own language: each language embeds with its own model, and its answers are in that language.
In two-stage mode (`semantic.rescore_model`) a candidate just under its threshold is judged by
the second model's similarity instead (tiers/policies/rescoring.py).

And only when its answer is not contradicted nearby (`semantic.answer_margin`): if another
neighbour within that margin of the best similarity also passes the guards but was answered
differently (answers below `verify.answer_agreement`), the cache holds two answers for what
reads as one question, and serving either is a coin toss; the lookup misses instead (measured
on Banking77: "How do I reset my PIN?" and "How can I reset my PIN?", cosine 0.995, belong to
different intents). The judging is tiers/semantic/judge.py, whatever index found the candidates.

The tier holds vectors and each entry's analysis, threshold and expiry (tiers/semantic/
holdings.py), not the answers: a candidate's entry is loaded from the key-value tiers by id. At
most `max_entries` vectors; past that the least recently used go (still servable by exact key);
past TTL + grace, swept out. Which partitions are held: tiers/partition_loader.py.
"""

from __future__ import annotations

import asyncio
import logging

import faiss
import numpy as np

from core.clock import Clock
from core.errors import CorruptEntry
from core.pacing import Pacer, Unpaced
from core.recorder import CacheRecorder, GuardName
from core.semantic_config import SemanticConfig
from normalize.keys.request import PARTITION_TAG_CHARS
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.signature import Analysis
from tiers.base import Entry, Invalidation, PartitionIndex
from tiers.policies.rescoring import RescoreBand
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.faiss_thread import FaissThread
from tiers.semantic.holdings import Holdings
from tiers.semantic.indexed import Indexed, entry_bytes
from tiers.semantic.judge import CandidateJudge, Neighbours
from tiers.semantic.protocol import NearestNotes, RescoreVector, SemanticCandidate
from tiers.semantic.snapshot import IndexImage, Restored
from tiers.semantic.vector_index import GraphShape, VectorIndex, best_of

_log = logging.getLogger("deja.semantic")

# Searching at least this many vectors runs in the search thread, not on the event loop.
OFF_LOOP_MIN_VECTORS = 4096


class SemanticTier:
    def __init__(
        self,
        config: SemanticConfig,
        guard: MeaningGuard,
        thresholds: ThresholdController,
        clock: Clock,
        recorder: CacheRecorder,
        rescoring: RescoreBand | None = None,
    ):
        self._config = config
        # Thresholds, guards and the answer check on the candidates (tiers/semantic/judge.py);
        # with `rescoring`, two-stage mode (tiers/policies/rescoring.py).
        self._judge = CandidateJudge(config, guard, thresholds, recorder, rescoring)
        self._rescore_dim = 0
        # Per language (two languages' vectors come from two models): its dimension, set once
        # its model is loaded, and one index per partition.
        self._dims: dict[str, int] = {}
        self._thresholds = thresholds
        self._clock = clock
        self._recorder = recorder
        self._held = Holdings(clock)
        self._rebuilding: set[tuple[str, str]] = set()
        # Searches and rebuilds in threads of their own: a rebuild to HNSW takes about 1 ms a
        # vector (20 s at the default flat_max_entries), and searches queued behind it would
        # wait that long. The old index serves meanwhile: the rebuild runs at idle priority.
        self._search_thread = FaissThread("deja-faiss-search")
        self._rebuild_thread = FaissThread("deja-faiss-rebuild", idle=True)
        self.evictions = 0
        # MODELS.md: FAISS on 2 OpenMP threads slows 10-30× when another process wants a core.
        faiss.omp_set_num_threads(1)

    def set_dimension(self, dim: int, language: str = "en") -> None:
        assert dim > 0 and not self._held.entries, "a dimension is set once, before any entry"
        self._dims[language] = dim

    def set_rescore_dimension(self, dim: int) -> None:
        assert dim > 0 and not self._held.entries, "a dimension is set once, before any entry"
        self._rescore_dim = dim

    @property
    def rescored(self) -> int:
        """Candidates judged by the second model's similarity (two-stage mode)."""
        return self._judge.rescored

    @property
    def dims(self) -> dict[str, int]:
        """Each language's vector dimension, once its model is loaded."""
        return dict(self._dims)

    def size(self) -> int:
        return len(self._held.entries)

    def partitions(self) -> int:
        return self._held.partitions()

    def tag_size(self, tag: str) -> int:
        return self._held.tag_size(tag)  # entries of the partition with this tag

    def entry_bytes(self) -> int:
        """The memory one indexed entry costs, estimated (tiers/semantic/indexed.py)."""
        return entry_bytes(max(self._dims.values(), default=0), self._config.hnsw_m)

    def drop_partition(self, tag: str) -> int:
        """Forget every vector of the partition with this tag at once (its entries stay in the
        key-value tiers); returns how many."""
        return self._held.drop(tag)

    async def images(self, tag: str) -> list[IndexImage] | None:
        """The partition's indexes and a copy of their entries' list, to snapshot (None: dropped
        or replaced while copied)."""
        return await self._held.images(tag, self._dims)

    def reserve_ids(self, count: int) -> int:  # fresh vector ids, for a snapshot's
        return self._held.reserve_ids(count)

    def version(self, tag: str) -> int:
        return self._held.version(tag)  # changes to what it holds so far (`Holdings`)

    async def install(self, restored: Restored, removed: set[str]) -> None:
        """A partition's index restored from a snapshot (see `Holdings.install`)."""
        await self._held.install(restored, removed, self._rescore_dim)
        await self._evict_past_cap()
        key = (restored.partition, restored.language)
        index = self._held.index(key)
        if index is not None:
            self._maybe_rebuild(key, index)

    async def close(self) -> None:
        await asyncio.gather(self._search_thread.close(), self._rebuild_thread.close())

    async def search(
        self,
        partition: str,
        vector: np.ndarray,
        query: Analysis,
        threshold_override: float | None = None,
        pacer: Pacer | None = None,
        notes: NearestNotes | None = None,
        rescore: RescoreVector | None = None,
    ) -> list[SemanticCandidate]:
        pacer = pacer or Unpaced()
        key = (partition, query.language)
        index = self._held.index(key)
        if index is None:
            return []
        # The search, and each guard check after it, is a fraction of a millisecond of Python;
        # each waits for the caller's pacer, so that exact hits can be served in between.
        await pacer.step()
        relaxed = threshold_override is not None
        live = await self._neighbours(key, index, vector, pacer, relaxed)
        chosen = await self._judge.choose(
            query, live, self._held, pacer, threshold_override, notes, rescore
        )
        if chosen is None:
            return []
        item, candidate = chosen
        self._held.served(item.entry_id)
        return [candidate]

    async def contradicts(
        self,
        partition: str,
        vector: np.ndarray,
        query: Analysis,
        entry_id: str,
        pacer: Pacer | None = None,
    ) -> bool:
        """Whether a neighbour contradicts `entry_id` as the answer to this query (see
        `_contradicted`): for matches found without a similarity search (the lemma key)."""
        key = (partition, query.language)
        index = self._held.index(key)
        item = self._held.entries.get(entry_id)
        if index is None or item is None or self._config.answer_margin <= 0:
            return False
        own = index.vector(item.vector_id)
        if own is None or self._held.answer(item) is None:
            return False
        similarity = self._thresholds.similarity(item.language, float(np.dot(vector, own)))
        pacer = pacer or Unpaced()
        neighbours = await self._neighbours(key, index, vector, pacer)
        if await self._judge.contradicted(query, item, similarity, neighbours, self._held, pacer):
            self._recorder.guard_rejected(GuardName.ANSWERS)
            return True
        return False

    async def _neighbours(
        self,
        key: tuple[str, str],
        index: PartitionIndex[faiss.Index],
        vector: np.ndarray,
        pacer: Pacer,
        relaxed: bool = False,
    ) -> Neighbours:
        """The `candidates` nearest entries, best first, each with its similarity on the
        common scale (tiers/policies/similarity_scale.py). A hit needs a fresh entry; a relaxed
        (degraded) match takes one within its grace."""
        k = self._config.candidates
        if len(index) >= OFF_LOOP_MIN_VECTORS:
            found = await self._search_thread.run(index.search, vector, k)
        else:
            # A part at a time (about 60 µs each), each after the first paced.
            parts = index.parts()
            results = [index.search_part(parts[0], vector, k)] if parts else []
            for part in parts[1:]:
                await pacer.step()
                results.append(index.search_part(part, vector, k))
            found = best_of(results, k)
        now, language = self._clock.time(), key[1]
        return [
            (item, self._thresholds.similarity(language, similarity))
            for item, similarity in (
                (self._held.record(key, vector_id), similarity) for vector_id, similarity in found
            )
            if item is not None and now < (item.hard_expires_at if relaxed else item.expires_at)
        ]

    async def add(self, entry: Entry) -> None:
        if entry.vector is None or entry.analysis is None:
            return
        if entry.entry_id in self._held.entries:
            await self.update(entry)
            return
        try:
            analysis = entry.parsed_analysis or Analysis.from_wire(entry.analysis)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptEntry(f"entry {entry.entry_id} has an unreadable analysis: {exc}") from exc
        vector = np.frombuffer(entry.vector, dtype=np.float32)
        dim = self._dims.get(analysis.language, 0)
        if not dim or vector.shape != (dim,):
            return  # a replica's with another embedding model or language: not comparable
        key = (entry.partition, analysis.language)
        index = self._held.index(key)
        if index is None:
            index = self._held.open(key, self._new_index(dim), dim, self._rescore_dim)
        vector_id = self._held.reserve_ids(1)
        index.add(vector_id, vector)
        answer = self._answer_of(entry, analysis.language)
        self._held.hold(Indexed.of(entry, vector_id, analysis), answer, self._rescore_of(entry))
        await self._evict_past_cap()
        self._maybe_rebuild(key, index)

    def _new_index(self, dim: int) -> VectorIndex:
        cfg = self._config
        return VectorIndex(dim, cfg.flat_max_entries, GraphShape.of(cfg))

    async def _evict_past_cap(self) -> None:
        while len(self._held.entries) > self._config.max_entries:
            await self.remove(self._held.coldest())
            self.evictions += 1

    def answer_vector(self, entry_id: str) -> np.ndarray | None:
        item = self._held.entries.get(entry_id)
        return None if item is None else self._held.answer(item)

    async def update(self, entry: Entry) -> None:
        item = self._held.entries.get(entry.entry_id)
        if item is not None:
            self._held.changed(entry.entry_id[:PARTITION_TAG_CHARS])
            item.threshold = entry.threshold
            item.learned_threshold = entry.learned_threshold
            item.expires_at = entry.expires_at
            item.hard_expires_at = entry.hard_expires_at
            self._held.attach(item, self._answer_of(entry, item.language), self._rescore_of(entry))

    def _answer_of(self, entry: Entry, language: str) -> np.ndarray | None:
        if entry.answer_vector is None:
            return None
        answer = np.frombuffer(entry.answer_vector, dtype=np.float32)
        # Another embedding model's vector (a replica configured differently) is not comparable.
        return answer if answer.shape == (self._dims.get(language, 0),) else None

    def _rescore_of(self, entry: Entry) -> np.ndarray | None:
        if entry.rescore_vector is None or not self._rescore_dim:
            return None
        vector = np.frombuffer(entry.rescore_vector, dtype=np.float32)
        return vector if vector.shape == (self._rescore_dim,) else None

    async def remove(self, entry_id: str) -> bool:
        if entry_id not in self._held.entries:
            return False
        left = self._held.release(entry_id)
        if left is not None:
            self._maybe_rebuild(*left)
        return True

    async def invalidate(self, selector: Invalidation) -> int:
        doomed = self._held.matching(selector)
        for entry_id in doomed:
            await self.remove(entry_id)
        return len(doomed)

    async def sweep(self) -> int:
        """Drop entries past TTL + grace; returns how many."""
        now = self._clock.time()
        gone = [
            item.entry_id for item in self._held.entries.values() if now >= item.hard_expires_at
        ]
        for entry_id in gone:
            await self.remove(entry_id)
        return len(gone)

    def _maybe_rebuild(self, key: tuple[str, str], index: PartitionIndex[faiss.Index]) -> None:
        if key in self._rebuilding or not index.wants_rebuild():
            return
        self._rebuilding.add(key)
        future = self._rebuild_thread.run(index.rebuild)

        def done(f: asyncio.Future[None]) -> None:
            self._rebuilding.discard(key)
            if f.cancelled() or self._rebuild_thread.closed:
                return
            if f.exception() is not None:
                _log.error("rebuilding the index %s failed", key, exc_info=f.exception())
            elif self._held.index(key) is index:
                # What changed during the rebuild may call for another (removals past a
                # quarter, or adds past the new graph's room) with nothing stored after it.
                self._maybe_rebuild(key, index)

        future.add_done_callback(done)
