"""Every long-lived part of one proxy, as `create_app` wired them, with their health view."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.clock import Clock
from core.config import DejaConfig, SemanticConfig, VerifyConfig
from fallback.breaker import Breaker
from proxy.answering.admission import AdmissionControl
from proxy.answering.entry_builder import EntryBuilder
from proxy.answering.feedback import ServedRequests
from proxy.answering.flights import FlightRegistry
from proxy.answering.verifier import Verifier
from proxy.http.request_ledger import RequestLedger
from proxy.http.telemetry import Telemetry
from proxy.upstream.client import UpstreamClient
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import ThresholdController
from tiers.policies.ttl import TtlPolicy
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.replication import StreamReplication
from tiers.service import CacheService
from tiers.stats import CacheStats

if TYPE_CHECKING:
    # Only for annotations: importing these loads spaCy, torch and FAISS, which a proxy
    # without the semantic tier never needs (create_app imports them when it is on).
    from normalize.runtime.model_features import SemanticFeatureSource
    from tiers.semantic.tier import SemanticTier


@dataclass
class Deja:
    config: DejaConfig
    clock: Clock
    stats: CacheStats
    service: CacheService
    upstream: UpstreamClient
    breaker: Breaker
    admission: AdmissionControl
    flights: FlightRegistry
    telemetry: Telemetry
    ttl: TtlPolicy
    entries: EntryBuilder
    lru: LruKTier | None = None
    redis: RedisConnection | None = None
    redis_tier: RedisTier | None = None
    replication: StreamReplication | None = None
    semantic: SemanticTier | None = None
    features: SemanticFeatureSource | None = None
    thresholds: ThresholdController = field(
        default_factory=lambda: ThresholdController(VerifyConfig(), SemanticConfig().threshold)
    )
    verifier: Verifier | None = None
    served: ServedRequests = field(default_factory=ServedRequests)
    ledger: RequestLedger | None = None  # set by create_app
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    # Set once everything the config enables is loaded (models, the rebuilt index).
    ready: bool = False
    startup_error: str | None = None

    def gauges(self) -> dict[str, float]:
        g: dict[str, float] = {
            "inflight_upstream_calls": self.admission.active,
            "queued_upstream_calls": self.admission.queued,
            "admission_rejections": self.admission.rejected,
            "breaker_open": 0.0 if self.breaker.snapshot().state == "closed" else 1.0,
            "breaker_trips": self.breaker.snapshot().trips,
            "hit_rate": self.stats.hit_rate(),
            "ready": 1.0 if self.ready else 0.0,
        }
        if self.lru is not None:
            g["lru_k_bytes"] = self.lru.bytes_used
            g["lru_k_evictions"] = self.lru.evictions
        if self.redis is not None:
            g["redis_up"] = 1.0 if self.redis.available else 0.0
            g["redis_outages"] = self.redis.outages
        if self.semantic is not None:
            g["semantic_entries"] = self.semantic.size()
            g["semantic_partitions"] = self.semantic.partitions()
            g["semantic_evictions"] = self.semantic.evictions
        if self.features is not None and self.features.ready:
            for worker, name in zip(
                self.features.process.workers, ("analysis", "embedding"), strict=True
            ):
                g[f"{name}_batches"] = worker.batches
                g[f"{name}_texts"] = worker.texts
                g[f"{name}_worker_restarts"] = worker.restarts
                g[f"{name}_queued"] = worker.queued
                g[f"{name}_background_queued"] = worker.background_queued
                g[f"{name}_background_refused"] = worker.background_refused
        if self.replication is not None:
            g["replication_events_applied"] = self.replication.applied
        estimate = self.thresholds.estimator.estimate()
        g["semantic_threshold"] = self.thresholds.global_threshold
        g["false_hit_rate"] = estimate.rate
        g["false_hit_rate_low"] = estimate.low
        g["false_hit_rate_high"] = estimate.high
        g["verified_hits"] = estimate.verified
        return g

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        b = self.breaker.snapshot()
        report: dict[str, Any] = {
            "upstream": self.config.upstream.url,
            "breaker": {
                "state": str(b.state),
                "failures_in_window": b.failures_in_window,
                "requests_in_window": b.requests_in_window,
                "trips": b.trips,
                "retry_after_s": b.retry_after_s,
            },
            "redis": {
                "configured": self.redis is not None,
                "available": self.redis.available if self.redis is not None else False,
            },
            "semantic": {
                "enabled": self.config.semantic.enabled,
                "models_loaded": self.features.ready if self.features is not None else False,
                "entries": self.semantic.size() if self.semantic is not None else 0,
            },
        }
        if self.startup_error is not None:
            report["error"] = self.startup_error
        return self.ready, report
