"""Counters the cache core records and the telemetry edge exports (never the other way round)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class CacheStats:
    # (tier, match) → hits, e.g. ("lru_k", "exact")
    hits: Counter[tuple[str, str]] = field(default_factory=Counter)
    misses: int = 0
    bypasses: int = 0
    stores: int = 0
    # outcome → count, e.g. "stale", "neighbour", "fallback"
    degraded: Counter[str] = field(default_factory=Counter)
    coalesced: int = 0
    # tier → failed calls (backend unreachable)
    tier_errors: Counter[str] = field(default_factory=Counter)
    # Why a finished answer was not stored: "incomplete" (a stream that broke off), "error",
    # "content_filter", "length" (cache.store_truncated off), "unfinished", "no_choices",
    # "too_large", "no_store", ...
    not_stored: Counter[str] = field(default_factory=Counter)
    # Semantic candidates rejected by a meaning guard, by reason.
    guard_rejections: Counter[str] = field(default_factory=Counter)
    evictions_by_feedback: int = 0
    prompt_tokens_saved: int = 0
    completion_tokens_saved: int = 0
    usd_saved: float = 0.0

    @property
    def total_hits(self) -> int:
        return sum(self.hits.values())

    def hit_rate(self) -> float:
        served = self.total_hits + self.misses
        return self.total_hits / served if served else 0.0
