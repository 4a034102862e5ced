"""The seam between the cache service and the similarity tier."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from core.pacing import Pacer
from core.recorder import GuardName
from normalize.meaning.signature import Analysis
from tiers.base import Entry, Invalidation, NearMiss

# Two-stage mode: the query's vector by the second model, computed when first asked (None: not
# to be had). The search asks only when a candidate lies in the rescore band.
RescoreVector = Callable[[], Awaitable[np.ndarray | None]]


@dataclass(frozen=True, slots=True)
class SemanticCandidate:
    """An entry whose prompt is close enough in meaning to answer the query."""

    entry_id: str
    similarity: float
    # Served only through the entry's learned threshold (under the usual one): such hits are
    # verified at a share of their own, into an estimate of their own.
    learned: bool = False


@dataclass(slots=True)
class NearestNotes:
    """What a search found about its nearest candidate, filled in by the search for a caller
    that asked why (X-Deja-Explain); a search without one notes nothing.

    The nearest candidate is noted; a further one replaces it only when it got further (past its
    threshold and the guards, to the answer check or a hit), since that one decided the lookup.
    """

    similarity: float | None = None
    threshold: float | None = None
    refused: GuardName | None = None
    # With learning on: the nearest candidate that passed the guards but fell under its
    # threshold by at most `verify.learn_distance`. Its entry may learn from this miss's answer.
    near_miss: NearMiss | None = None

    def saw(self, similarity: float, threshold: float, refused: GuardName | None) -> None:
        """A candidate turned down before the answer check: noted when it is the nearest."""
        if self.similarity is None:
            self.similarity, self.threshold, self.refused = similarity, threshold, refused

    def missed_near(
        self, entry_id: str, similarity: float, language: str = "en", held_back: bool = False
    ) -> None:
        """A guard-passing candidate just under its threshold: noted when it is the first."""
        if self.near_miss is None:
            self.near_miss = NearMiss(entry_id, similarity, language, held_back)

    def decided(self, similarity: float, threshold: float, refused: GuardName | None) -> None:
        """The candidate that was served (`refused` None) or refused by the answer check."""
        self.similarity, self.threshold, self.refused = similarity, threshold, refused


class SemanticIndex(Protocol):
    """A search runs in steps (the FAISS search in parts, each guard check in parts); it awaits
    its caller's `pacer` before each (none: nothing waits), so the caller decides whether other
    work goes first (core/pacing.py). The index keeps no pacer of its own."""

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
        """The nearest entry of `partition` that passes its similarity threshold and the meaning
        guards and is fresh (a list of at most one). With `threshold_override` (a relaxed,
        degraded match) that threshold applies instead, and entries within their grace count.
        With `notes`, what decided the search is written there. With `rescore` (two-stage
        mode), candidates in the rescore band are judged by the second model."""
        ...

    async def contradicts(
        self,
        partition: str,
        vector: np.ndarray,
        query: Analysis,
        entry_id: str,
        pacer: Pacer | None = None,
    ) -> bool:
        """Whether another entry near the query asks the same question but was answered
        differently from `entry_id` (the answer check, for lemma-key matches)."""
        ...

    def answer_vector(self, entry_id: str) -> np.ndarray | None:
        """The indexed entry's answer embedding, once attached (None otherwise)."""
        ...

    async def add(self, entry: Entry) -> None: ...

    async def update(self, entry: Entry) -> None:
        """Take a changed threshold or TTL of an indexed entry into account, and its answer
        embedding when it holds none yet."""
        ...

    async def remove(self, entry_id: str) -> bool: ...

    async def invalidate(self, selector: Invalidation) -> int: ...

    def size(self) -> int: ...


class NullSemanticIndex:
    """The semantic tier turned off."""

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
        return []

    async def contradicts(
        self,
        partition: str,
        vector: np.ndarray,
        query: Analysis,
        entry_id: str,
        pacer: Pacer | None = None,
    ) -> bool:
        return False

    def answer_vector(self, entry_id: str) -> np.ndarray | None:
        return None

    async def add(self, entry: Entry) -> None:
        return None

    async def update(self, entry: Entry) -> None:
        return None

    async def remove(self, entry_id: str) -> bool:
        return False

    async def invalidate(self, selector: Invalidation) -> int:
        return 0

    def size(self) -> int:
        return 0


class PartitionDemand(Protocol):
    """Where the cache service says which partitions are in use: a replica with Redis holds a
    partition's vectors only once asked about it (tiers/partition_loader.py)."""

    def want(self, partition: str) -> None:
        """A lookup or a store in `partition`: hold its vectors, loading them in the background
        when they are not held yet (the caller never waits for the load)."""
        ...


class EveryPartitionHeld:
    """An index that holds every partition it was given (no Redis to load from), or none."""

    def want(self, partition: str) -> None:
        return None
