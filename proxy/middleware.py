"""Cross-cutting request handling: request ids, OpenAI-style errors, the access log, metrics.

Every response, whatever produced it, carries `X-Request-Id` (the client's, when it sent a sane
one) and, on the cached routes, `X-Deja-Cache`. Every error becomes an OpenAI error object;
an unexpected exception is logged with its traceback and answered with a 500, never a crash.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from core.errors import DejaError, MethodNotAllowed, NotFound
from proxy.context import CONTEXT, CacheOutcome, RequestContext
from proxy.responses import error_response
from proxy.telemetry import Telemetry

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_CACHED_ROUTES = frozenset({"chat", "completions"})
# What the access log records as the status of a request whose client went away first.
CLIENT_CLOSED = 499

_access_log = logging.getLogger("deja.access")
_log = logging.getLogger("deja.proxy")


def request_id_of(request: web.Request) -> str:
    given = request.headers.get("X-Request-Id", "")
    return given if _REQUEST_ID.match(given) else uuid.uuid4().hex


def build_middleware(telemetry: Telemetry, access_log: bool) -> Middleware:
    @web.middleware
    async def deja_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        ctx = RequestContext(request_id_of(request), _route_of(request.path), time.monotonic())
        request[CONTEXT] = ctx
        status = 500
        try:
            response = await _respond(request, handler, ctx)
            status = response.status
            return response
        except asyncio.CancelledError:
            status = CLIENT_CLOSED
            raise
        finally:
            elapsed = time.monotonic() - ctx.started_s
            cache = str(ctx.cache) if ctx.cache is not None else "none"
            telemetry.observe_request(ctx.route, cache, status, elapsed)
            if access_log and _access_log.isEnabledFor(logging.INFO):
                _access_log.info(_access_line(request, ctx, status, elapsed))

    return deja_middleware


async def _respond(
    request: web.Request, handler: Handler, ctx: RequestContext
) -> web.StreamResponse:
    try:
        return await handler(request)
    except DejaError as error:
        return error_response(error, ctx)
    except web.HTTPMethodNotAllowed as exc:
        response = error_response(
            MethodNotAllowed(f"{request.method} is not allowed on {request.path}"), ctx
        )
        response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return response
    except web.HTTPNotFound:
        return error_response(NotFound(f"no route {request.method} {request.path}"), ctx)
    except web.HTTPException as exc:
        other = DejaError(exc.reason)
        other.status = exc.status
        other.error_type = "invalid_request_error" if exc.status < 500 else "server_error"
        return error_response(other, ctx)
    except ConnectionResetError:
        raise asyncio.CancelledError("client went away") from None
    except Exception:  # noqa: BLE001 - the request boundary: log, then a 500 error object
        _log.exception(
            "unhandled error serving %s %s (request %s)",
            request.method,
            request.path,
            ctx.request_id,
        )
        return error_response(
            DejaError("internal error; see the proxy's log for this request id"), ctx
        )


async def on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
    ctx = request.get(CONTEXT)
    if ctx is None:
        return
    response.headers["X-Request-Id"] = ctx.request_id
    if ctx.route in _CACHED_ROUTES and "X-Deja-Cache" not in response.headers:
        response.headers["X-Deja-Cache"] = str(ctx.cache or CacheOutcome.BYPASS)


def _route_of(path: str) -> str:
    if path == "/v1/chat/completions":
        return "chat"
    if path == "/v1/completions":
        return "completions"
    if path.startswith("/v1/"):
        return "passthrough"
    if path.startswith("/admin/"):
        return "admin"
    if path in ("/healthz", "/readyz", "/metrics"):
        return path.strip("/")
    return "unknown"


def _access_line(request: web.Request, ctx: RequestContext, status: int, elapsed_s: float) -> str:
    record = {
        "request_id": ctx.request_id,
        "method": request.method,
        "route": ctx.route,
        "status": status,
        "tenant": ctx.tenant or None,
        "cache": str(ctx.cache) if ctx.cache is not None else None,
        "tier": ctx.tier,
        "match": ctx.match,
        "degraded": ctx.degraded,
        "coalesced": ctx.coalesced or None,
        "entry": ctx.entry_id,
        "upstream_status": ctx.upstream_status,
        "error": ctx.error_code,
        "latency_ms": round(elapsed_s * 1000, 2),
    }
    return json.dumps({k: v for k, v in record.items() if v is not None}, separators=(",", ":"))
