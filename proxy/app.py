"""The composition root: `create_app(config)` builds every part and owns their lifecycles.

Nothing else constructs long-lived objects; nothing happens at import time. Parts that are
turned off are replaced by their "off" objects here (no Redis → no Redis tier; breaker off →
AlwaysClosedBreaker; semantic off → NoFeatureSource), so no code below tests a flag.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from core.clock import Clock, SystemClock
from core.config import DejaConfig
from fallback.breaker import AlwaysClosedBreaker, Breaker, CircuitBreaker
from fallback.degrade import Degrader
from normalize.fingerprint import TenantHasher
from normalize.screen import PromptScreen
from proxy.access_log import AccessLog, NoAccessLog
from proxy.admission import AdmissionControl
from proxy.auth import ClientAuth
from proxy.completions import CompletionHandler
from proxy.flight import FlightRegistry
from proxy.health_routes import HealthRoutes
from proxy.openai_routes import OpenAIRoutes
from proxy.request_frame import RequestFrame
from proxy.telemetry import Telemetry
from proxy.upstream import UpstreamClient
from proxy.upstream_call import UpstreamCaller
from tiers.base import CacheTier
from tiers.features import NoFeatureSource
from tiers.lru_k import LruKTier
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.service import CacheService
from tiers.stats import CacheStats
from tiers.ttl import TtlPolicy

_log = logging.getLogger("deja.app")


@dataclass
class Deja:
    """Every long-lived part of one proxy, for lifecycles, health and the admin API."""

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
    lru: LruKTier | None = None
    redis: RedisConnection | None = None
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    access_log: AccessLog | NoAccessLog = field(default_factory=NoAccessLog)
    ready: bool = False

    def gauges(self) -> dict[str, float]:
        g: dict[str, float] = {
            "inflight_upstream_calls": self.admission.active,
            "queued_upstream_calls": self.admission.queued,
            "admission_rejections": self.admission.rejected,
            "breaker_open": 0.0 if self.breaker.snapshot().state == "closed" else 1.0,
            "semantic_entries": self.service.semantic.size(),
            "hit_rate": self.stats.hit_rate(),
        }
        if self.lru is not None:
            g["lru_k_bytes"] = self.lru.bytes_used
            g["lru_k_evictions"] = self.lru.evictions
        if self.redis is not None:
            g["redis_up"] = 1.0 if self.redis.available else 0.0
            g["redis_outages"] = self.redis.outages
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
            },
            "redis": {
                "configured": self.redis is not None,
                "available": self.redis.available if self.redis is not None else False,
            },
            "semantic": {
                "enabled": self.config.semantic.enabled,
                "entries": self.service.semantic.size(),
            },
        }
        return self.ready, report


DEJA = web.AppKey("deja", Deja)


def create_app(config: DejaConfig, clock: Clock | None = None) -> web.Application:
    clock = clock or SystemClock()
    if not config.cache.tenant_secret:
        _log.warning(
            "cache.tenant_secret is empty: using the development secret; set one in production"
        )
    stats = CacheStats()
    tiers: list[CacheTier] = []
    lru = LruKTier(config.lru_k, clock) if config.lru_k.enabled else None
    if lru is not None:
        tiers.append(lru)
    redis = RedisConnection(config.redis) if config.redis.url else None
    if redis is not None:
        tiers.append(RedisTier(redis, config.redis))
    service = CacheService(tiers, clock, stats)
    upstream = UpstreamClient(config.upstream)
    breaker: Breaker = (
        CircuitBreaker(config.breaker, clock) if config.breaker.enabled else AlwaysClosedBreaker()
    )
    u = config.upstream
    admission = AdmissionControl(u.max_concurrent, u.max_queued, u.queue_timeout_s)
    ttl = TtlPolicy(config.ttl)
    flights = FlightRegistry()
    deja = Deja(
        config,
        clock,
        stats,
        service,
        upstream,
        breaker,
        admission,
        flights,
        Telemetry(config.telemetry, stats, lambda: deja.gauges()),
        ttl,
        lru,
        redis,
    )

    caller = UpstreamCaller(upstream, service, ttl, breaker, admission, clock, config, stats)
    auth = ClientAuth(config.proxy, config.upstream)
    handler = CompletionHandler(
        config=config,
        service=service,
        flights=flights,
        caller=caller,
        features=NoFeatureSource(),
        degrader=Degrader(config.degrade, service, clock),
        auth=auth,
        hasher=TenantHasher(config.cache.tenant_secret, config.cache.share_across_tenants),
        screen=PromptScreen(config.guardrails.injection_patterns),
        clock=clock,
        stats=stats,
    )
    access_log = AccessLog(sys.stderr) if config.server.access_log else NoAccessLog()
    deja.access_log = access_log
    app = web.Application(client_max_size=config.server.max_passthrough_bytes)
    app[DEJA] = deja
    app.cleanup_ctx.append(_lifecycle)
    frame = RequestFrame(app, deja.telemetry, access_log)
    HealthRoutes(deja.readiness, deja.telemetry, config.telemetry.metrics).register(frame)
    OpenAIRoutes(handler, upstream, auth, config.server.max_passthrough_bytes).register(frame)
    frame.not_found_route()
    return app


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    deja = app[DEJA]
    await deja.upstream.start()
    if deja.redis is not None:
        await deja.redis.start()
    deja.ready = True
    yield
    deja.ready = False
    await deja.flights.drain(deja.config.server.shutdown_grace_s)
    for task in deja.background:
        task.cancel()
    for task in deja.background:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await deja.upstream.close()
    deja.access_log.flush()
    if deja.redis is not None:
        await deja.redis.close()
    deja.telemetry.shutdown()
