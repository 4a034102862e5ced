"""The composition root: `create_app(config)` makes the whole proxy's aiohttp app (single
process, or edge mode's worker); `create_edge_app` makes edge mode's front (its request handling
is proxy/edge/front.py's). The three share the request parts (credential rule, client auth,
prompt screen), the store builder (the front's without the semantic index), the access log
and the order of their lifecycles.

Nothing else constructs long-lived objects; nothing happens at import time. The parts are
built once, frozen (proxy/composition/parts.py); this module adds the objects that answer
requests over them, mounts the routes, and registers the parts' lifecycles
(proxy/composition/lifecycle.py). The routes receive the parts they use and, for what they
report, callables (proxy/composition/report.py), never the graph.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, BinaryIO

from aiohttp import web

from core.clock import Clock, SystemClock
from core.config import DejaConfig
from fallback.degrade import Degrader
from normalize.prompt_features import FeatureSource, NoFeatureSource
from proxy.answering.feedback import FeedbackService
from proxy.answering.flight_call import UpstreamCaller
from proxy.answering.warmup import WarmUp
from proxy.composition.lifecycle import front_resources, proxy_resources, register
from proxy.composition.parts import ProxyParts, build_front, build_proxy
from proxy.composition.report import (
    misses_report,
    models_ready,
    readiness_report,
    series_report,
    stats_report,
)
from proxy.edge.front import EdgeCompletions, EdgeRelay, FrontRecorder
from proxy.edge.report import REPORT_PATH, EdgeReportReceiver
from proxy.edge.worker_guard import shared_secret_guard
from proxy.edge.worker_link import WorkerLink
from proxy.edge.worker_process import WorkerProcess
from proxy.http.admin_routes import AdminRoutes, AdminViews
from proxy.http.completions import CompletionHandler
from proxy.http.dashboard_routes import DashboardRoutes
from proxy.http.embeddings import EmbeddingsHandler
from proxy.http.frame import RequestFrame
from proxy.http.health_routes import HealthRoutes
from proxy.http.hit_writer import HitWriter
from proxy.http.openai_routes import OpenAIRoutes
from proxy.http.request_reader import RequestReader
from proxy.protocol.request_parser import RequestParser

if TYPE_CHECKING:  # only proxy/http/telemetry.py imports OpenTelemetry at run time
    from opentelemetry.sdk.trace.export import SpanExporter

_log = logging.getLogger("deja.app")

# The app's parts, for tests that look inside a running proxy; no route reads them.
PARTS = web.AppKey("parts", ProxyParts)


def create_app(
    config: DejaConfig,
    clock: Clock | None = None,
    *,
    edge_worker: bool = False,
    shared_secret: str = "",
    access_log_stream: BinaryIO | None = None,
    span_exporter: SpanExporter | None = None,
) -> web.Application:
    """The whole proxy. With `edge_worker`, as edge mode's worker (see `create_edge_app`): it also
    takes the front's reports, and stops when the front is gone; with `shared_secret` too, as a
    shared worker fronts reach over TCP: only requests carrying the secret get in
    (proxy/edge/worker_guard.py), and no front is its parent. The access log (when
    `server.access_log`) goes to `access_log_stream`, stderr unless given. `span_exporter`
    (tests) takes every span as it ends, whatever `telemetry.traces` says."""
    if not config.cache.tenant_secret:
        _log.warning(
            "cache.tenant_secret is empty: using the development secret; set one in production"
        )
    parts = build_proxy(
        config,
        clock or SystemClock(),
        access_log_stream if access_log_stream is not None else sys.stderr.buffer,
        span_exporter,
    )
    guards = [shared_secret_guard(shared_secret)] if shared_secret else []
    # What a handler may read whole (admin and feedback bodies); the routes read their bodies
    # within their own limits, and pass-through bodies stream (`server.max_passthrough_bytes`).
    app = web.Application(client_max_size=config.server.max_body_bytes, middlewares=guards)
    app[PARTS] = parts
    register(app, proxy_resources(parts, edge_worker=edge_worker and not shared_secret))
    frame = RequestFrame(app, parts.ledger, parts.telemetry.tracer)
    HealthRoutes(
        readiness_report(parts), parts.telemetry, parts.ledger, config.telemetry.metrics
    ).register(frame)
    features: FeatureSource = (
        parts.store.features if parts.store.features is not None else NoFeatureSource()
    )
    requests = parts.requests
    reader = RequestReader(
        config.server, requests.auth, requests.credential_rule, requests.screen, features
    )
    OpenAIRoutes(
        _completions(parts, reader),
        _embeddings(parts),
        parts.upstream.client,
        requests.auth,
        config.server.max_passthrough_bytes,
    ).register(frame)
    if config.admin.token:
        _admin_routes(parts, features).register(frame)
        DashboardRoutes().register(frame)
    if edge_worker:
        # Outside the frame: a report is not a client's request. Reachable only through the
        # worker's unix socket, in a directory only the front's user can enter, or with the
        # shared secret.
        receiver = EdgeReportReceiver(parts.observers, parts.store.recorder, parts.served)
        app.router.add_post(REPORT_PATH, receiver.handle)
    frame.not_found_route()
    return app


def _completions(parts: ProxyParts, reader: RequestReader) -> CompletionHandler:
    config, store, upstream, clock = parts.config, parts.store, parts.upstream, parts.clock
    return CompletionHandler(
        cache=config.cache,
        upstream=config.upstream,
        reader=reader,
        service=store.service,
        flights=upstream.flights,
        caller=UpstreamCaller(
            upstream.gate,
            parts.answers,
            store.recorder,
            upstream.upstream_turns,
            parts.telemetry.tracer,
        ),
        answers=parts.answers,
        degrader=Degrader(config.degrade, store.service, clock, upstream.breaker),
        verifier=parts.verifier,
        served=parts.served,
        clock=clock,
        recorder=store.recorder,
        lookup_turns=store.lookup_turns,
        upstream_turns=upstream.upstream_turns,
        hits=HitWriter(config.pricing, parts.served, clock, store.recorder),
        misses=parts.misses,
        tracer=parts.telemetry.tracer,
    )


def _embeddings(parts: ProxyParts) -> EmbeddingsHandler:
    config, requests = parts.config, parts.requests
    return EmbeddingsHandler(
        server=config.server,
        pricing=config.pricing,
        auth=requests.auth,
        rule=requests.credential_rule,
        service=parts.store.service,
        gate=parts.upstream.gate,
        answers=parts.answers,
        recorder=parts.store.recorder,
        tracer=parts.telemetry.tracer,
    )


def _admin_routes(parts: ProxyParts, features: FeatureSource) -> AdminRoutes:
    config, store, requests = parts.config, parts.store, parts.requests
    warmup = WarmUp(
        parts.answers,
        RequestParser(config.server.max_messages, requests.screen),
        requests.credential_rule,
        features,
    )
    views = AdminViews(
        stats=stats_report(parts),
        series=series_report(parts),
        misses=misses_report(parts),
        models_ready=models_ready(parts),
        effective_threshold=store.thresholds.effective,
        clock=parts.clock,
    )
    return AdminRoutes(
        config.admin.token,
        views,
        store.service,
        parts.served,
        FeedbackService(store.service, parts.ttl, store.thresholds, store.recorder),
        warmup,
        requests.auth,
        requests.credential_rule,
    )


def create_edge_app(
    config: DejaConfig,
    link: WorkerLink,
    worker: WorkerProcess | None,
    clock: Clock | None = None,
    *,
    access_log_stream: BinaryIO | None = None,
    span_exporter: SpanExporter | None = None,
) -> web.Application:
    """The front. `worker` is started and stopped with the app; None when something else runs
    it (tests). The access log goes to `access_log_stream`, stderr unless given; spans to
    `span_exporter` when given (tests), else as `telemetry.traces` says."""
    parts = build_front(
        config,
        clock or SystemClock(),
        access_log_stream if access_log_stream is not None else sys.stderr.buffer,
        link,
        worker,
        span_exporter,
    )
    requests = parts.requests
    reader = RequestReader(
        config.server, requests.auth, requests.credential_rule, requests.screen, NoFeatureSource()
    )
    hits = HitWriter(config.pricing, parts.report, parts.clock, parts.store.recorder)
    completions = EdgeCompletions(
        config.cache, reader, parts.store.service, hits, link, parts.without, parts.tracer
    )
    relay = EdgeRelay(
        link,
        parts.without,
        parts.ledger,
        parts.report,
        config.server.max_passthrough_bytes,
        parts.tracer,
    )

    app = web.Application(client_max_size=config.server.max_body_bytes)
    register(app, front_resources(parts))
    frame = RequestFrame(app, FrontRecorder(parts.ledger), parts.tracer)
    frame.route("/v1/chat/completions", "chat", completions.chat, methods=["POST"])
    frame.route("/v1/completions", "completions", completions.completions, methods=["POST"])
    frame.route("/healthz", "healthz", relay.healthz, methods=["GET"])
    frame.route("/{tail:.*}", "relayed", relay.relay)
    return app
