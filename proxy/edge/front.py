"""Edge mode's front: exact hits served here, everything else relayed to the worker process.

    client ─▶ front (this process, the public port)
                read (auth, body, directives, exact key) ─▶ LRU-K ─▶ Redis ─hit─▶ answer
                └ anything else ─▶ worker (`deja serve` on a unix socket, or shared workers
                                   over TCP) ─▶ its answer, as is
                                   └ none reachable (shared) ─▶ the upstream, marked

Why: the exact hits' tail under semantic load is the semantic requests' own Python on the same
event loop (their HTTP handling, upstream calls and stores, in steps of 0.1-0.3 ms that a hit
arriving mid-step waits out). In a process of its own, at idle priority, that work is preempted
by the kernel the moment a hit arrives (README, "Edge mode").

The front holds no semantic index, starts no models and never stores: it reads the entries the
worker writes from Redis (`server.edge` requires it) into its own LRU-K, and follows the
replication stream so that deletions, invalidations, feedback and refreshed answers reach its
LRU-K as they reach any replica's. What it serves it reports to the worker (proxy/edge/report.py),
whose metrics, stats, access log and feedback count both processes. `/healthz` is the front's;
every other route, `/readyz` and `/metrics` included, is the worker's. The front's app is made
by `create_edge_app` in proxy/composition/app.py.
"""

from __future__ import annotations

from collections.abc import Awaitable

from aiohttp import web

from core.config import CacheConfig
from core.errors import WorkerUnavailable, WorkerUnreachable
from core.tracing import StageTracer
from normalize.keys.request import Route
from proxy.edge.report import EdgeReport
from proxy.edge.without_worker import WithoutWorker
from proxy.edge.worker_link import WorkerLink
from proxy.http.body import StreamedBody, read_body
from proxy.http.finished_requests import RequestLedger
from proxy.http.hit_writer import HitWriter, describe_lookup
from proxy.http.request_context import CONTEXT, RequestContext
from proxy.http.request_reader import RequestReader
from tiers.service import CacheService

# Relayed requests that read what the front reports: its report goes first.
_READS_REPORTS = ("/admin/", "/metrics")


class EdgeCompletions:
    """The two cached routes at the front: a fresh exact hit is answered, the rest relayed."""

    def __init__(
        self,
        cache: CacheConfig,
        reader: RequestReader,
        service: CacheService,
        hits: HitWriter,
        link: WorkerLink,
        without: WithoutWorker,
        tracer: StageTracer,
    ) -> None:
        self._tracer = tracer
        self._without = without
        self._cache_completions = cache.cache_completions
        self._reader = reader
        self._service = service
        self._hits = hits
        self._link = link

    def chat(self, request: web.Request) -> Awaitable[web.StreamResponse]:
        return self.handle(request, Route.CHAT, request[CONTEXT])

    def completions(self, request: web.Request) -> Awaitable[web.StreamResponse]:
        return self.handle(request, Route.COMPLETIONS, request[CONTEXT])

    async def handle(
        self, request: web.Request, route: Route, ctx: RequestContext
    ) -> web.StreamResponse:
        with self._tracer.span("deja.read"):
            read = await self._reader.read(request, route)
        creq = read.cache
        ctx.tenant = creq.tenant
        if (route is Route.CHAT or self._cache_completions) and read.directives.lookup:
            with self._tracer.span("deja.lookup") as span:
                outcome = await self._service.lookup(
                    creq, read.features, read.directives.max_age_s, explain=read.directives.explain
                )
                describe_lookup(span, outcome)
            if outcome.hit is not None:
                # Only exact hits are served here: the explanation says `served=exact`.
                ctx.explanation = outcome.explanation
                return await self._hits.write(request, ctx, creq, outcome.hit)
        try:
            return await self._link.forward(request, ctx, read.raw, self._tracer.outgoing_headers())
        except WorkerUnreachable as exc:
            return await self._without.forward(request, ctx, read.raw, exc)


class FrontRecorder:
    """The front's request recorder: what it answered itself goes to its ledger (access log,
    and the report's metric observations); what it relayed, the worker records."""

    def __init__(self, ledger: RequestLedger) -> None:
        self._ledger = ledger

    def record(self, method: str, ctx: RequestContext, status: int, elapsed_s: float) -> None:
        if not ctx.relayed:
            self._ledger.record(method, ctx, status, elapsed_s)


class EdgeRelay:
    """Every other route: the worker's answer."""

    def __init__(
        self,
        link: WorkerLink,
        without: WithoutWorker,
        ledger: RequestLedger,
        report: EdgeReport,
        max_body_bytes: int,
        tracer: StageTracer,
    ) -> None:
        self._tracer = tracer
        self._link = link
        self._without = without
        self._ledger = ledger
        self._report = report
        self._max_body_bytes = max_body_bytes

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def relay(self, request: web.Request) -> web.StreamResponse:
        ctx = request[CONTEXT]
        # A read's body is read whole; any other streams on to the worker (an upload of
        # hundreds of MB passes through in bounded memory), within the same limit.
        streams = request.method not in ("GET", "HEAD", "OPTIONS") and request.body_exists
        streamed = StreamedBody(request, self._max_body_bytes) if streams else None
        body = streamed if streamed is not None else await read_body(request, self._max_body_bytes)
        if request.path.startswith(_READS_REPORTS):
            self._ledger.drain()
            await self._report.flush()
        try:
            reply = await self._link.forward(request, ctx, body, self._tracer.outgoing_headers())
        except WorkerUnreachable as exc:
            if streamed is not None and streamed.too_large:
                raise streamed.refusal() from None  # the body broke the relay, not the worker
            if request.path == "/readyz":
                return self._without.readiness(f"unreachable: {exc.message}")
            if streamed is not None and streamed.bytes_read:
                raise  # part of the body went to a worker that refused it: it cannot go again
            return await self._without.forward(request, ctx, body, exc)
        except WorkerUnavailable:
            if streamed is not None and streamed.too_large:
                raise streamed.refusal() from None  # the body broke the relay, not the worker
            raise
        return self._without.readiness(reply) if request.path == "/readyz" else reply
