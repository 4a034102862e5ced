"""User feedback on cached answers, and the record of which request got which entry.

A signal ("useful" +1.2, "irrelevant" −0.8, or a number clamped to that range) joins the
entry's last three; the TTL is recomputed from the entry's stored confidence and certainty with
the new feedback sum, and a sum at or below `ttl.evict_feedback_sum` (two irrelevant signals)
evicts the entry everywhere. Negative feedback naming a request that was a semantic hit is a
disagreement about that entry: it raises the entry's floor above the similarity it was served
at. It is counted, but it moves neither the global threshold nor the false-hit estimate
(tiers/policies/thresholds.py says why).

`ServedRequests` remembers, per replica and for a bounded number of recent requests, which
entry each request id was answered with, so feedback can name the request id it got.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from core.recorder import CacheRecorder
from tiers.base import Entry, MatchKind
from tiers.policies.thresholds import ThresholdController
from tiers.policies.ttl import TtlPolicy, signal_value
from tiers.service import CacheService


@dataclass(frozen=True, slots=True)
class ServedRecord:
    entry_id: str
    tenant: str
    match: MatchKind | None  # None: the request stored the entry (a miss)
    similarity: float | None


class ServedRequests:
    """Request ids are the clients' own (X-Request-Id is echoed), so two tenants may use the
    same one: records are kept per (tenant, request id), and a tenant only ever sees its own.
    The admin, who names no tenant, gets the most recent request with that id."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._capacity = capacity
        self._records: OrderedDict[tuple[str, str], ServedRecord] = OrderedDict()
        self._latest: dict[str, str] = {}  # request id → the tenant that used it last

    @property
    def enabled(self) -> bool:
        """False with no capacity (no admin API: nobody can name a request in feedback), so
        callers skip building records that would be dropped at once."""
        return self._capacity > 0

    def remember(self, request_id: str, record: ServedRecord) -> None:
        key = (record.tenant, request_id)
        self._records[key] = record
        self._records.move_to_end(key)
        self._latest[request_id] = record.tenant
        if len(self._records) > self._capacity:
            (tenant, oldest), _ = self._records.popitem(last=False)
            if self._latest.get(oldest) == tenant:
                del self._latest[oldest]

    def get(self, request_id: str, tenant: str | None = None) -> ServedRecord | None:
        """The record of `request_id` for `tenant` (None: whoever used the id last)."""
        if tenant is None:
            tenant = self._latest.get(request_id)
            if tenant is None:
                return None
        return self._records.get((tenant, request_id))


@dataclass(frozen=True, slots=True)
class FeedbackOutcome:
    entry_id: str
    evicted: bool
    feedback: tuple[float, ...]
    ttl_s: float
    threshold: float


class FeedbackService:
    def __init__(
        self,
        service: CacheService,
        ttl: TtlPolicy,
        thresholds: ThresholdController,
        recorder: CacheRecorder,
    ) -> None:
        self._service = service
        self._ttl = ttl
        self._thresholds = thresholds
        self._recorder = recorder

    async def apply(
        self, entry: Entry, signal: str | float, served: ServedRecord | None = None
    ) -> FeedbackOutcome:
        value = signal_value(signal)
        feedback = self._ttl.add_signal(entry.feedback, value)
        threshold = entry.threshold
        if value < 0 and served is not None and served.match is MatchKind.SEMANTIC:
            assert served.similarity is not None, "a semantic hit records its similarity"
            self._thresholds.record_complaint()
            threshold = self._thresholds.floor_after(threshold, served.similarity, agreed=False)
        if self._ttl.should_evict(feedback):
            await self._service.delete(entry.entry_id)
            self._recorder.evicted_by_feedback()
            return FeedbackOutcome(entry.entry_id, True, feedback, 0.0, threshold)
        ttl_s = self._ttl.ttl_s(entry.confidence, entry.certainty, feedback)
        updated = replace(entry, feedback=feedback, ttl_s=ttl_s, threshold=threshold)
        await self._service.replace(updated)
        return FeedbackOutcome(entry.entry_id, False, feedback, ttl_s, threshold)
