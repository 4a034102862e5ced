"""The values every tier stores and returns, the one Protocol every key-value tier meets, and
the one a semantic partition's vector index meets.

An `Entry` is one cached answer with everything needed to serve it again (the completion,
without its per-response `id` and `created`) and to manage it (keys, TTL and its inputs,
feedback, similarity threshold, meaning analysis). Entries are immutable: feedback or a new
threshold produce a new Entry that replaces the old one (`CacheTier.replace`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from core.recorder import GuardName
from normalize.keys.request import PARTITION_TAG_CHARS, Route
from normalize.meaning.signature import Analysis
from normalize.prompt_features import SemanticSkip

if TYPE_CHECKING:  # only for annotations: the key-value tiers need no numpy
    import numpy as np

ENTRY_FORMAT_VERSION = 1


class TierName(StrEnum):
    LRU_K = "lru_k"
    REDIS = "redis"
    SEMANTIC = "semantic"


class MatchKind(StrEnum):
    EXACT = "exact"
    LEMMA = "lemma"
    SEMANTIC = "semantic"


@dataclass(frozen=True, slots=True)
class Entry:
    entry_id: str
    route: Route
    tenant: str
    namespace: str
    model: str
    partition: str
    exact_key: str
    lemma_key: str | None
    # The completion as compact JSON without "id" and "created" (fresh ones go on every hit);
    # for Route.EMBEDDINGS, the input's vector as little-endian float32 bytes.
    body: bytes
    stored_at: float  # wall-clock seconds
    ttl_s: float
    # Expired entries are kept this much longer, to be served only as marked degraded answers.
    grace_s: float
    # TTL inputs (DESIGN.md "Dynamic TTL"), kept so feedback can recompute the TTL.
    confidence: float = 1.0
    certainty: float = 1.0
    feedback: tuple[float, ...] = ()
    # This entry's own similarity floor (tiers/policies/thresholds.py): raised by disagreements,
    # lowered by agreements. A candidate needs max(global threshold, floor).
    threshold: float = 0.0
    # A lower threshold learned from near-misses whose fresh answers agreed with this entry's
    # (tiers/policies/thresholds.py); None: none learned, the usual threshold applies.
    learned_threshold: float | None = None
    # The answer's token counts (from its usage), for the tokens-saved statistics.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # The prompt's text (its last user turn), kept only with `admin.store_prompts` for the
    # dashboard's listing: prompts may be private. None otherwise.
    prompt: str | None = None
    # `normalize.meaning.lemmas.Analysis.to_wire()` of the prompt, for the semantic tier's guards.
    analysis: str | None = None
    # The prompt's embedding, float32 bytes; only the Redis and semantic tiers keep it.
    vector: bytes | None = None
    # The answer's embedding, float32 bytes (proxy/answering/answer_agreement.py): the semantic
    # tier refuses a hit when a neighbour almost as close was answered differently. Attached
    # after the store.
    answer_vector: bytes | None = None
    # `analysis` already parsed, when the process that made the entry has it (never stored,
    # never compared): indexing a new entry then costs no second parse on the event loop.
    parsed_analysis: Analysis | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        assert self.entry_id.startswith(self.partition[:PARTITION_TAG_CHARS]), (
            "an entry id must start with its partition tag"
        )

    @property
    def expires_at(self) -> float:
        return self.stored_at + self.ttl_s

    @property
    def language(self) -> str:
        """The prompt's language, as its analysis says ("en" without one): the embedding model
        of its vectors, and the scale its cosines are read on."""
        if self.parsed_analysis is not None:
            return self.parsed_analysis.language
        return "en" if self.analysis is None else Analysis.from_wire(self.analysis).language

    @property
    def hard_expires_at(self) -> float:
        """After this nobody may serve the entry, not even as a degraded answer."""
        return self.stored_at + self.ttl_s + self.grace_s

    def is_fresh(self, now_s: float) -> bool:
        return now_s < self.expires_at

    def is_gone(self, now_s: float) -> bool:
        return now_s >= self.hard_expires_at

    def age_s(self, now_s: float) -> float:
        return max(0.0, now_s - self.stored_at)

    @property
    def size_bytes(self) -> int:
        # What an in-process copy costs, roughly: the body, the analysis and the vectors (about
        # 1.5 KB each with MiniLM), plus fixed overhead for the rest.
        vectors = len(self.vector or b"") + len(self.answer_vector or b"")
        return len(self.body) + len(self.analysis or "") + len(self.prompt or "") + vectors + 512

    def completion(self, response_id: str, created: int) -> dict[str, Any]:
        """The stored completion as a dict with a fresh id and created time."""
        data: dict[str, Any] = {"id": response_id}
        data.update(json.loads(self.body))
        data["created"] = created
        return data

    def render_json(self, response_id: str, created: int) -> bytes:
        """The stored completion as JSON bytes with a fresh id and created time, without
        parsing the body again (the hot path of every non-streamed hit)."""
        head = b'{"id":"' + response_id.encode() + b'","created":' + str(created).encode()
        if len(self.body) <= 2:  # "{}"
            return head + b"}"
        return head + b"," + self.body[1:]


@dataclass(frozen=True, slots=True)
class Lookup:
    """A found entry and how it was found."""

    entry: Entry
    tier: TierName
    match: MatchKind
    similarity: float | None = None
    # A semantic hit served only through the entry's learned threshold (under its usual one).
    learned: bool = False


@dataclass(frozen=True, slots=True)
class NearMiss:
    """A miss's nearest candidate that passed the meaning guards but fell under its threshold
    by at most `verify.learn_distance`: the entry that may learn from the miss's fresh answer."""

    entry_id: str
    similarity: float
    language: str = "en"  # the prompt's: the model of both answers' embeddings
    # Its learned threshold would have let the miss hit, but learned hits are off
    # (`ThresholdController.learned_hits`): the fresh answer is evidence about those hits.
    held_back: bool = False


@dataclass(frozen=True, slots=True)
class LookupExplanation:
    """Why a lookup hit or missed, for a client that asked (X-Deja-Explain): numbers about the
    nearest semantic candidate, never anything of its entry's text.

    `similarity` is the nearest candidate's cosine and `threshold` the one it needed (the larger
    of the global threshold and its entry's floor, or its learned threshold where that is lower).
    `refused` names the guard or check that turned it down (a `GuardName`), or why no candidate
    was looked at (a `SemanticSkip`); absent when the candidate was below its threshold (then
    similarity < threshold says so). `served` is the match a hit was served by.
    """

    similarity: float | None = None
    threshold: float | None = None
    refused: GuardName | SemanticSkip | None = None
    served: MatchKind | None = None


@dataclass(frozen=True, slots=True)
class Invalidation:
    """Which entries an invalidation removes; None fields match anything."""

    tenant: str | None = None
    namespace: str | None = None
    model: str | None = None

    def matches(self, entry: Entry) -> bool:
        return (
            (self.tenant is None or entry.tenant == self.tenant)
            and (self.namespace is None or entry.namespace == self.namespace)
            and (self.model is None or entry.model == self.model)
        )


class CacheTier(Protocol):
    """A key-value tier: entries by id, found by exact or lemma key.

    `get` returns an entry until it is gone (past TTL + grace); whether it is fresh is the
    caller's decision. Unreachable backends raise `core.errors.TierUnavailable`.
    """

    @property
    def name(self) -> TierName: ...

    async def get(self, key: str) -> Entry | None:
        """The entry stored under an exact or lemma key."""
        ...

    async def get_by_id(self, entry_id: str) -> Entry | None: ...

    async def put(self, entry: Entry) -> str | None:
        """Store `entry` under its id, its exact key and (when set) its lemma key. Returns the
        id of the other entry that held the exact key until now (None when there was none):
        a newer answer to the same question supersedes it, and the service retires it."""
        ...

    async def replace(self, entry: Entry) -> bool:
        """Overwrite an entry that is still stored (same id); False when it is gone."""
        ...

    async def delete(self, entry_id: str) -> bool: ...

    async def invalidate(self, selector: Invalidation) -> int:
        """Delete every entry `selector` matches; returns how many."""
        ...

    async def matching(self, selector: Invalidation) -> list[Entry]:
        """Every stored entry `selector` matches, without vectors (a full scan, for the admin
        API's listing: admin speed, not the hot path)."""
        ...

    async def count(self) -> int: ...


@runtime_checkable
class InProcessTier(CacheTier, Protocol):
    """A tier held in this process's memory. It also answers a lookup without an await: the
    cache service asks it first that way, so an in-process hit costs no coroutines."""

    def get_now(self, key: str) -> Entry | None:
        """What `get` returns, synchronously."""
        ...


# What one part of a `PartitionIndex` is (a FAISS index for `VectorIndex`): opaque to callers,
# which only hand a part from `parts()` back to `search_part`.
PartT = TypeVar("PartT")


class PartitionIndex(Protocol[PartT]):
    """One semantic partition's vectors, searched by cosine: what the semantic tier asks of
    `tiers.semantic.vector_index.VectorIndex`. Vectors are unit length, so inner product is cosine.

    Ids are the caller's, and each is added once: adding an id that is held, or one removed
    before, is not supported (the semantic tier takes a new id for every vector). The vectors
    may sit in several parts; a caller on the event loop searches them a part at a time and
    merges the results with `tiers.semantic.vector_index.best_of`, one off the loop calls
    `search`. When `wants_rebuild()` says so, the caller runs `rebuild()` (blocking) in a worker
    thread; every other method may be called meanwhile.
    """

    def __len__(self) -> int:
        """How many vectors are held (removed ones not counted)."""
        ...

    def add(self, vector_id: int, vector: np.ndarray) -> None: ...

    def remove(self, vector_id: int) -> bool:
        """Forget a vector; False when it is not held."""
        ...

    def vector(self, vector_id: int) -> np.ndarray | None: ...

    def parts(self) -> list[PartT]:
        """The parts as they are now, to search one at a time with `search_part`."""
        ...

    def search_part(self, part: PartT, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Up to k (id, cosine) pairs of one part, best first."""
        ...

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Up to k (id, cosine) pairs over every part, best first."""
        ...

    def wants_rebuild(self) -> bool:
        """Whether the index should change shape (flat past its size limit, or too many
        removals left behind)."""
        ...

    def rebuild(self) -> None:
        """Rebuild in the shape the size calls for, keeping every vector held."""
        ...
