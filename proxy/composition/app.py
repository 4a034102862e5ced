"""The composition root: `create_app(config)` builds every part and owns their lifecycles.

Nothing else constructs long-lived objects; nothing happens at import time. Parts that are
turned off are replaced by their "off" objects here (no Redis → no Redis tier and no
replication; breaker off → AlwaysClosedBreaker; semantic off → NoFeatureSource and no index),
so no code below tests a flag.

Start-up: the HTTP port opens at once (/healthz answers, exact matches are served); the models
load and the semantic index is rebuilt from Redis in the background, and /readyz turns 200 when
that is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any

from aiohttp import web

from core.clock import Clock, SystemClock
from core.config import DejaConfig
from core.errors import TierUnavailable
from fallback.breaker import AlwaysClosedBreaker, Breaker, CircuitBreaker
from fallback.degrade import Degrader
from normalize.keys.screen import PromptScreen
from normalize.prompt_features import FeatureSource, NoFeatureSource
from proxy.answering.admission import AdmissionControl
from proxy.answering.entry_builder import EntryBuilder
from proxy.answering.feedback import FeedbackService, ServedRequests
from proxy.answering.flight_call import UpstreamCaller
from proxy.answering.flights import FlightRegistry
from proxy.answering.gate import UpstreamGate
from proxy.answering.store_rule import StoreRule
from proxy.answering.verifier import Verifier
from proxy.answering.warmup import WarmUp
from proxy.composition.parts import Deja
from proxy.edge.report import REPORT_PATH, EdgeReportReceiver
from proxy.edge.worker_process import exit_with_parent
from proxy.http.access_log import AccessLog, NoAccessLog
from proxy.http.admin_routes import AdminRoutes
from proxy.http.client_auth import ClientAuth
from proxy.http.completions import CompletionHandler
from proxy.http.health_routes import HealthRoutes
from proxy.http.hit_writer import HitWriter
from proxy.http.openai_routes import OpenAIRoutes
from proxy.http.request_frame import RequestFrame
from proxy.http.request_ledger import RequestLedger
from proxy.http.request_reader import RequestReader
from proxy.http.telemetry import Telemetry
from proxy.protocol.credentials import CredentialRule
from proxy.upstream.client import UpstreamClient
from tiers.base import CacheTier
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import ThresholdController
from tiers.policies.ttl import TtlPolicy
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.replication import StreamReplication
from tiers.service import CacheService
from tiers.stats import CacheStats

if TYPE_CHECKING:  # only proxy/http/telemetry.py imports OpenTelemetry at run time
    from opentelemetry.sdk.trace.export import SpanExporter

_GC_YOUNG_OBJECTS = 10_000
_log = logging.getLogger("deja.app")
SWEEP_INTERVAL_S = 30.0

DEJA = web.AppKey("deja", Deja)


def create_app(
    config: DejaConfig,
    clock: Clock | None = None,
    *,
    edge_worker: bool = False,
    span_exporter: SpanExporter | None = None,
) -> web.Application:
    """The whole proxy. With `edge_worker`, as edge mode's worker (proxy/edge/front.py): it also
    takes the front's reports, and stops when the front is gone. `span_exporter` (tests) takes
    every span as it ends, whatever `telemetry.traces` says."""
    clock = clock or SystemClock()
    if not config.cache.tenant_secret:
        _log.warning(
            "cache.tenant_secret is empty: using the development secret; set one in production"
        )
    stats = CacheStats()
    deja = _build_core(config, clock, stats, span_exporter)
    if not config.admin.token:
        deja.served = ServedRequests(capacity=0)
    features: FeatureSource = deja.features if deja.features is not None else NoFeatureSource()
    gate = UpstreamGate(deja.upstream, deja.breaker, deja.admission)
    credential_rule = CredentialRule(config.proxy, config.cache)
    auth = ClientAuth(config.proxy, config.upstream, credential_rule)
    screen = PromptScreen(config.guardrails.injection_patterns)
    reader = RequestReader(config.server, auth, credential_rule, screen, features)
    embedder = deja.features
    deja.verifier = Verifier(config.verify, gate, deja.service, deja.thresholds, embedder)
    # Which answers are stored, one rule for misses, verification (both through the caller) and
    # warm-up lines.
    store_rule = StoreRule(config.cache.store_truncated)
    handler = CompletionHandler(
        cache=config.cache,
        upstream=config.upstream,
        reader=reader,
        service=deja.service,
        flights=deja.flights,
        caller=UpstreamCaller(
            gate,
            deja.service,
            deja.entries,
            stats,
            store_rule,
            deja.telemetry.tracer,
        ),
        degrader=Degrader(config.degrade, deja.service, clock, deja.breaker),
        verifier=deja.verifier,
        served=deja.served,
        clock=clock,
        stats=stats,
        hits=HitWriter(config.pricing, deja.served, clock, stats),
        tracer=deja.telemetry.tracer,
    )
    access_log = AccessLog(sys.stderr.buffer) if config.server.access_log else NoAccessLog()
    deja.ledger = RequestLedger(deja.telemetry, access_log)
    app = web.Application(client_max_size=config.server.max_passthrough_bytes)
    app[DEJA] = deja
    app.cleanup_ctx.append(_lifecycle)
    frame = RequestFrame(app, deja.ledger, deja.telemetry.tracer)
    HealthRoutes(deja.readiness, deja.telemetry, deja.ledger, config.telemetry.metrics).register(
        frame
    )
    OpenAIRoutes(handler, deja.upstream, auth, config.server.max_passthrough_bytes).register(frame)
    if config.admin.token:
        feedback = FeedbackService(deja.service, deja.ttl, deja.thresholds, stats)
        warmup = WarmUp(
            deja.service,
            deja.entries,
            credential_rule,
            features,
            screen,
            config.server.max_messages,
            store_rule,
        )
        AdminRoutes(deja, feedback, warmup, auth, credential_rule).register(frame)
    if edge_worker:
        # Outside the frame: a report is not a client's request. Reachable only through the
        # worker's unix socket, in a directory only the front's user can enter.
        receiver = EdgeReportReceiver(deja.telemetry, stats, deja.served)
        app.router.add_post(REPORT_PATH, receiver.handle)
        parent = os.getppid()
        app.on_startup.append(lambda _: _track(deja, exit_with_parent(parent), "deja-edge-parent"))
    frame.not_found_route()
    return app


async def _track(deja: Deja, job: Coroutine[Any, Any, None], name: str) -> None:
    deja.background.append(asyncio.get_running_loop().create_task(job, name=name))


def _build_core(
    config: DejaConfig, clock: Clock, stats: CacheStats, span_exporter: SpanExporter | None
) -> Deja:
    """The tiers, the cache service and the upstream side."""
    local: list[CacheTier] = []
    lru = LruKTier(config.lru_k, clock) if config.lru_k.enabled else None
    if lru is not None:
        local.append(lru)
    redis = RedisConnection(config.redis) if config.redis.url else None
    redis_tier = RedisTier(redis, config.redis) if redis is not None else None
    tiers: list[CacheTier] = [*local, *([redis_tier] if redis_tier is not None else [])]
    thresholds = ThresholdController(config.verify, config.semantic.threshold)
    ttl = TtlPolicy(config.ttl)
    features = semantic = None
    if config.semantic.enabled:
        # Imported here: spaCy, torch and FAISS are heavy, and a deployment without the
        # semantic tier should not pay for them.
        from normalize.meaning.guards import MeaningGuard
        from normalize.runtime.model_features import SemanticFeatureSource
        from tiers.semantic.tier import SemanticTier

        features = SemanticFeatureSource(config.semantic)
        semantic = SemanticTier(
            config.semantic, MeaningGuard(config.semantic), thresholds, clock, stats
        )
    service = CacheService(tiers, clock, stats, semantic)
    replication = None
    if redis is not None and redis_tier is not None:
        replication = StreamReplication(redis, redis_tier, config.redis, local, service.semantic)
        service.replicate_through(replication)
    u = config.upstream
    breaker: Breaker = (
        CircuitBreaker(config.breaker, clock) if config.breaker.enabled else AlwaysClosedBreaker()
    )
    deja = Deja(
        config=config,
        clock=clock,
        stats=stats,
        service=service,
        upstream=UpstreamClient(u, clock=clock),
        breaker=breaker,
        admission=AdmissionControl(u.max_concurrent, u.max_queued, u.queue_timeout_s),
        flights=FlightRegistry(),
        telemetry=Telemetry(config.telemetry, stats, lambda: deja.gauges(), span_exporter),
        ttl=ttl,
        entries=EntryBuilder(
            config.cache, config.degrade, config.semantic, ttl, thresholds, clock, features
        ),
        lru=lru,
        redis=redis,
        redis_tier=redis_tier,
        replication=replication,
        semantic=semantic,
        features=features,
        thresholds=thresholds,
    )
    return deja


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    deja = app[DEJA]
    await deja.upstream.start()
    if deja.redis is not None:
        await deja.redis.start()
    loop = asyncio.get_running_loop()
    deja.background.append(loop.create_task(_warm_up(deja), name="deja-warm-up"))
    if deja.semantic is not None:
        deja.background.append(loop.create_task(_sweep(deja), name="deja-sweeper"))
    yield
    deja.ready = False
    await deja.flights.drain(deja.config.server.shutdown_grace_s)
    if deja.verifier is not None:
        await deja.verifier.drain()
    for task in deja.background:
        task.cancel()
    for task in deja.background:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if deja.features is not None:
        await deja.features.close()
    if deja.semantic is not None:
        await deja.semantic.close()
    await deja.upstream.close()
    if deja.ledger is not None:
        await deja.ledger.close()
    if deja.redis is not None:
        await deja.redis.close()
    deja.telemetry.shutdown()


async def _warm_up(deja: Deja) -> None:
    """Load the models, rebuild the semantic index, then follow the other replicas."""
    try:
        if deja.features is not None and deja.semantic is not None:
            await deja.features.start()
            deja.semantic.set_dimension(deja.features.dim)
        if deja.replication is not None:
            try:
                await deja.replication.bootstrap()
            except TierUnavailable as exc:
                # Redis is down: serve now, rebuild when it returns (follow() retries).
                _log.warning("could not rebuild the semantic index from redis yet: %s", exc)
    except Exception as exc:  # noqa: BLE001 - reported on /readyz; the proxy serves exact matches
        deja.startup_error = f"start-up failed: {exc!r}"
        _log.exception("start-up failed; serving exact matches only")
        return
    deja.ready = True
    settle_collector()
    _log.info("ready")
    if deja.replication is not None:
        await deja.replication.follow()


def settle_collector() -> None:
    """Once start-up is done (here and in edge mode's front)."""
    # Everything built so far lives as long as the process: move it out of the collector's
    # sight, so a full collection (which pauses the event loop) only walks request garbage.
    gc.collect()
    gc.freeze()
    # A young generation of 10,000 objects instead of 700: with many requests in flight, each
    # young collection promoted their live objects towards the old generation, which then
    # filled up and triggered full collections that walk every cached entry (tens of ms each
    # with 30,000 entries, a few times a second under load). Measured: GC time during LRU-K
    # hits on a filled cache fell from 2.8% to 0.4% of the run. Request garbage is nearly all
    # freed by reference counting; the memory test bounds what cycles may hold.
    gc.set_threshold(_GC_YOUNG_OBJECTS, 10, 10)


async def _sweep(deja: Deja) -> None:
    assert deja.semantic is not None
    while True:
        await asyncio.sleep(SWEEP_INTERVAL_S)
        await deja.semantic.sweep()
