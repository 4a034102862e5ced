"""What a front does with a request when no worker can be reached.

With a worker process of its own (`NoWorkerFallback`) there is nothing to do: the worker is
starting or restarting with the front, the request is a 503 (`worker_unavailable`) and
`/readyz` says `starting`. With shared workers (`DirectUpstream`) the front carries on alone:
exact hits are its own anyway; an OpenAI route (a miss, a stream, `/v1/models`) goes straight
to the upstream, uncached and marked (`X-Deja-Cache: bypass`, `X-Deja-Degraded:
worker-unreachable`); `/readyz` is the worker's when it is 200, else 200 with `"status":
"degraded"` (the front serves: a sidecar must not take its application out of service because
a shared pool is down or a worker is starting); the admin API and `/metrics`, which are the
workers', stay 503.
"""

from __future__ import annotations

import json
from typing import Protocol

from aiohttp import web

from core.errors import WorkerUnavailable
from proxy.http.client_auth import ClientAuth
from proxy.http.openai_routes import send_upstream
from proxy.http.request_context import CacheOutcome, RequestContext
from proxy.upstream.client import RequestBody, UpstreamClient

# X-Deja-Degraded on answers that went to the upstream because no worker was reachable.
WORKER_UNREACHABLE = "worker-unreachable"


class WithoutWorker(Protocol):
    async def forward(
        self, request: web.Request, ctx: RequestContext, body: RequestBody, why: WorkerUnavailable
    ) -> web.StreamResponse: ...

    def readiness(self, worker: web.StreamResponse | str) -> web.StreamResponse:
        """`/readyz`: given the worker's answer, or why no worker answered."""
        ...


class NoWorkerFallback:
    """The front's own worker process: it is the only one, so its absence is an error."""

    async def forward(
        self, request: web.Request, ctx: RequestContext, body: RequestBody, why: WorkerUnavailable
    ) -> web.StreamResponse:
        raise why

    def readiness(self, worker: web.StreamResponse | str) -> web.StreamResponse:
        if not isinstance(worker, str):
            return worker  # the front is ready when its worker is
        # Readiness keeps its own shape: starting, not an error object.
        return _json(503, {"status": "starting", "worker": "not answering yet"})


class DirectUpstream:
    """Shared workers: the OpenAI routes go to the upstream directly, marked."""

    def __init__(self, upstream: UpstreamClient, auth: ClientAuth) -> None:
        self._upstream = upstream
        self._auth = auth

    async def forward(
        self, request: web.Request, ctx: RequestContext, body: RequestBody, why: WorkerUnavailable
    ) -> web.StreamResponse:
        if not request.path.startswith("/v1/"):
            raise why  # the workers' own routes: admin, metrics
        ctx.cache = CacheOutcome.BYPASS
        ctx.degraded = WORKER_UNREACHABLE
        self._auth.credentials(request.headers)  # as the worker would (401 for a wrong key)
        safe = request.method in ("GET", "HEAD", "OPTIONS")
        return await send_upstream(request, ctx, self._upstream, self._auth, body, retry=safe)

    def readiness(self, worker: web.StreamResponse | str) -> web.StreamResponse:
        if not isinstance(worker, str):
            if worker.status == 200:
                return worker
            worker = f"a worker answered {worker.status}"  # starting, or stopping
        return _json(200, {"status": "degraded", "worker": worker})


def _json(status: int, report: dict[str, str]) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(report).encode(), content_type="application/json"
    )
