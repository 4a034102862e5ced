"""What the cache did, counted where it happens and read where it is exported.

Every layer records (the tiers their errors and guard rejections, the answering side what it
did not store, the routes hits, misses and degraded answers), so the recorder lives in core and
its methods are the events. Nothing else writes a count. The exporters (`/metrics` in
proxy/http/telemetry.py, `/admin/v1/stats`) read a frozen `CacheCounts` snapshot, and edge
mode's front hands what it served itself to the worker as `ServedCounts`
(proxy/edge/report.py).

Labels are kept as the strings they always were: they are the stats JSON keys and the
Prometheus label values, so a StrEnum passed in is counted under its value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NewType, TypeVar

from core.clock import Clock, SystemClock
from core.health_signals import MissSpread


class NotStoredReason(StrEnum):
    """Why a finished answer was not stored."""

    ERROR = "error"  # the upstream answered with a non-2xx status
    BAD_BODY = "bad_body"  # a 2xx body that is not a JSON object
    INCOMPLETE = "incomplete"  # a stream that broke off, carried an error event or garbled
    NO_STORE = "no_store"  # the request asked not to be stored, or may not be
    TOO_LARGE = "too_large"  # over the entry size limit
    NO_CHOICES = "no_choices"  # not a completion with choices
    UNFINISHED = "unfinished"  # a choice without a finish reason
    LENGTH = "length"  # cut at max_tokens, with cache.store_truncated off
    CONTENT_FILTER = "content_filter"


# A finish reason outside the ones OpenAI documents (an upstream's own, e.g. a future one): never
# stored, and counted under its own name, as the upstream sent it.
OtherFinishReason = NewType("OtherFinishReason", str)

_Label = TypeVar("_Label", str, tuple[str, str])


class GuardName(StrEnum):
    """The check that refused a semantic candidate."""

    ANSWERS = "answers"  # a neighbour with a different answer contradicts it (answer margin)
    LANGUAGE = "language"
    NEGATION = "negation"
    ANTONYM = "antonym"
    NUMBER = "number"
    ENTITY = "entity"
    QUESTION = "question"
    ROLE = "role"

    @classmethod
    def of_reason(cls, reason: str) -> GuardName:
        """The guard that wrote a meaning guard's reason: its first word, as in
        "negation: 1 vs 0 negators" (normalize/meaning/guards.py, `GuardVerdict.reason`)."""
        return cls(reason.split(":")[0].split(" ")[0])


@dataclass(frozen=True, slots=True)
class ServedCounts:
    """What a process served itself and the tier errors it met on the way: edge mode's front
    hands these to the worker, which counts them as its own."""

    hits: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (tier, match) → hits
    tier_errors: Mapping[str, int] = field(default_factory=dict)
    prompt_tokens_saved: int = 0
    completion_tokens_saved: int = 0
    usd_saved: float = 0.0

    @property
    def empty(self) -> bool:
        return not (
            self.hits
            or self.tier_errors
            or self.prompt_tokens_saved
            or self.completion_tokens_saved
            or self.usd_saved
        )


@dataclass(frozen=True, slots=True)
class CacheCounts:
    """The counts at one moment. A label never recorded reads 0."""

    hits: Mapping[tuple[str, str], int]  # (tier, match) → hits, e.g. ("lru_k", "exact")
    misses: int
    bypasses: int
    stores: int
    degraded: Mapping[str, int]  # kind → answers, e.g. "stale", "neighbour", "fallback"
    coalesced: int
    tier_errors: Mapping[str, int]  # tier → failed calls (backend unreachable)
    not_stored: Mapping[str, int]  # NotStoredReason or finish reason → answers
    guard_rejections: Mapping[str, int]  # GuardName → semantic candidates
    evictions_by_feedback: int
    prompt_tokens_saved: int
    completion_tokens_saved: int
    usd_saved: float

    @property
    def total_hits(self) -> int:
        return sum(self.hits.values())

    @property
    def hit_rate(self) -> float:
        served = self.total_hits + self.misses
        return self.total_hits / served if served else 0.0


class CacheRecorder:
    """The cache's counters, one method per event. Used from the event loop only."""

    def __init__(self, clock: Clock | None = None) -> None:
        # The partitions of recent misses, for the miss-storm signal (core/health_signals.py).
        self.miss_spread = MissSpread(clock or SystemClock())
        self._hits: Counter[tuple[str, str]] = Counter()
        self._misses = 0
        self._bypasses = 0
        self._stores = 0
        self._degraded: Counter[str] = Counter()
        self._coalesced = 0
        self._tier_errors: Counter[str] = Counter()
        self._not_stored: Counter[str] = Counter()
        self._guard_rejections: Counter[str] = Counter()
        self._evictions_by_feedback = 0
        self._prompt_tokens_saved = 0
        self._completion_tokens_saved = 0
        self._usd_saved = 0.0

    # --- events --------------------------------------------------------------------------

    def hit(
        self, tier: str, match: str, prompt_tokens: int, completion_tokens: int, usd: float
    ) -> None:
        """A request answered from `tier` by a `match`, saving the entry's tokens and `usd`."""
        self._hits[(str(tier), str(match))] += 1
        self._prompt_tokens_saved += prompt_tokens
        self._completion_tokens_saved += completion_tokens
        self._usd_saved += usd

    def miss(self, partition: str) -> None:
        """A lookup that found nothing in any tier, in `partition` (CacheRequest.partition)."""
        self._misses += 1
        self.miss_spread.miss(partition)

    def bypass(self) -> None:
        """A request that skipped the lookup (not cacheable, or asked not to look)."""
        self._bypasses += 1

    def coalesced(self) -> None:
        """A miss that joined another caller's upstream call."""
        self._coalesced += 1

    def degraded(self, kind: str) -> None:
        """An answer served in place of the upstream's, by its `DegradeKind`."""
        self._degraded[str(kind)] += 1

    def tier_error(self, tier: str) -> None:
        """A call to `tier` (or "replication") that failed: the backend is unreachable."""
        self._tier_errors[str(tier)] += 1

    def stored(self) -> None:
        self._stores += 1

    def not_stored(self, reason: NotStoredReason | OtherFinishReason) -> None:
        """A finished answer that was not stored, and why."""
        self._not_stored[str(reason)] += 1

    def guard_rejected(self, guard: GuardName) -> None:
        """A semantic candidate refused by `guard`."""
        self._guard_rejections[str(guard)] += 1

    def evicted_by_feedback(self) -> None:
        """An entry deleted because its feedback fell below the eviction floor."""
        self._evictions_by_feedback += 1

    # --- reading and handing over ----------------------------------------------------------

    def snapshot(self) -> CacheCounts:
        return CacheCounts(
            hits=_frozen(self._hits),
            misses=self._misses,
            bypasses=self._bypasses,
            stores=self._stores,
            degraded=_frozen(self._degraded),
            coalesced=self._coalesced,
            tier_errors=_frozen(self._tier_errors),
            not_stored=_frozen(self._not_stored),
            guard_rejections=_frozen(self._guard_rejections),
            evictions_by_feedback=self._evictions_by_feedback,
            prompt_tokens_saved=self._prompt_tokens_saved,
            completion_tokens_saved=self._completion_tokens_saved,
            usd_saved=self._usd_saved,
        )

    def take_served(self) -> ServedCounts:
        """The served counts since the last take, and zero in their place (edge mode's front,
        whose worker counts them)."""
        taken = ServedCounts(
            hits=dict(self._hits),
            tier_errors=dict(self._tier_errors),
            prompt_tokens_saved=self._prompt_tokens_saved,
            completion_tokens_saved=self._completion_tokens_saved,
            usd_saved=self._usd_saved,
        )
        self._hits.clear()
        self._tier_errors.clear()
        self._prompt_tokens_saved = self._completion_tokens_saved = 0
        self._usd_saved = 0.0
        return taken

    def add_served(self, counts: ServedCounts) -> None:
        """Count what another process served (edge mode's worker, a front's report), or give
        back what `take_served` took and could not hand over."""
        self._hits.update(counts.hits)  # Counter.update adds
        self._tier_errors.update(counts.tier_errors)
        self._prompt_tokens_saved += counts.prompt_tokens_saved
        self._completion_tokens_saved += counts.completion_tokens_saved
        self._usd_saved += counts.usd_saved


def _frozen(counts: Counter[_Label]) -> Mapping[_Label, int]:
    # A copy that stays a Counter (a label never recorded reads 0), behind a read-only view.
    return MappingProxyType(Counter(counts))
