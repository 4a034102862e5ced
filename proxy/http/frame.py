"""What every request goes through: request id, OpenAI-style errors, the request ledger
(metrics and access log).

Every route is registered through `RequestFrame.route()`, which wraps its handler. (An aiohttp
middleware would do the same, but aiohttp rebuilds the middleware chain with
functools.update_wrapper on every request, which costs a cache hit a measurable share of its
time.) A catch-all route answers unknown paths with a 404 error object, and the wrapper answers
a method a route does not take with a 405, so the router never produces a plain-text error.

Every response carries `X-Request-Id` (the client's, when it sent a sane one) and, on the
cached routes, `X-Deja-Cache`. An unexpected exception is logged with its traceback and
answered with a 500 error object; the process never dies of a request.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web

from core.errors import DejaError, MethodNotAllowed, NotFound
from core.ids import IdSequence
from core.tracing import NoopTracer, SpanNotes, StageTracer
from proxy.http.finished_requests import RequestRecorder
from proxy.http.request_context import CONTEXT, CacheOutcome, RequestContext
from proxy.http.responses import error_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_CACHED_ROUTES = frozenset({"chat", "completions", "responses", "embeddings"})
# What the access log records as the status of a request whose client went away first.
CLIENT_CLOSED = 499

_log = logging.getLogger("deja.proxy")


class RequestIds:
    """The client's X-Request-Id when it sent a sane one, else a new id."""

    def __init__(self) -> None:
        self._sequence = IdSequence()

    def of(self, request: web.Request) -> str:
        given = request.headers.get("X-Request-Id")
        if given and _REQUEST_ID.match(given):
            return given
        return self._sequence.next_id()


class RequestFrame:
    def __init__(
        self, app: web.Application, ledger: RequestRecorder, tracer: StageTracer | None = None
    ):
        self._app = app
        self._ledger = ledger
        self._tracer = tracer or NoopTracer()
        self._ids = RequestIds()

    def route(
        self, path: str, label: str, handler: Handler, methods: Collection[str] = ("*",)
    ) -> None:
        """Serve `path` with `handler` for `methods` ("*": any), inside the frame."""
        allowed = frozenset(methods)
        self._app.router.add_route("*", path, self._wrap(label, handler, allowed))

    def not_found_route(self) -> None:
        """The last route: every unknown path gets a 404 error object."""

        async def not_found(request: web.Request) -> web.StreamResponse:
            raise NotFound(f"no route {request.method} {request.path}")

        self._app.router.add_route(
            "*", "/{tail:.*}", self._wrap("unknown", not_found, frozenset("*"))
        )

    def _wrap(self, label: str, handler: Handler, allowed: frozenset[str]) -> Handler:
        any_method = "*" in allowed
        if "GET" in allowed:
            allowed = allowed | {"HEAD"}

        async def framed(request: web.Request) -> web.StreamResponse:
            ctx = RequestContext(self._ids.of(request), label, time.monotonic())
            request[CONTEXT] = ctx
            status = 500
            # The client's trace context (traceparent) is the parent of the request's span.
            with self._tracer.request_span("deja.request", request.headers) as span:
                try:
                    if not any_method and request.method not in allowed:
                        response: web.StreamResponse = error_response(
                            MethodNotAllowed(f"{request.method} is not allowed on {request.path}"),
                            ctx,
                        )
                        response.headers["Allow"] = ", ".join(sorted(allowed))
                    else:
                        try:
                            response = await handler(request)
                        except Exception as exc:  # noqa: BLE001 - translated (or re-raised) below
                            response = _error_response_for(exc, request, ctx)
                    status = response.status
                    if not response.prepared:
                        _stamp(response, ctx)
                    return response
                except asyncio.CancelledError:
                    status = CLIENT_CLOSED
                    raise
                finally:
                    self._ledger.record(
                        request.method, ctx, status, time.monotonic() - ctx.started_s
                    )
                    _describe(span, request.method, ctx, status)

        return framed


def _error_response_for(
    exc: Exception, request: web.Request, ctx: RequestContext
) -> web.StreamResponse:
    """The request boundary: what a handler raised, as an OpenAI-style error object. (A plain
    function called from the wrapper's except clause, not a wrapping coroutine: one coroutine
    less on every request.)"""
    if isinstance(exc, DejaError):
        return error_response(exc, ctx)
    if isinstance(exc, web.HTTPException):
        # aiohttp's own refusals (e.g. a body over client_max_size) as error objects.
        other = DejaError(exc.reason)
        other.status = exc.status
        other.error_type = "invalid_request_error" if exc.status < 500 else "server_error"
        return error_response(other, ctx)
    if isinstance(exc, ConnectionResetError):
        raise asyncio.CancelledError("client went away") from None
    _log.error(
        "unhandled error serving %s %s (request %s)",
        request.method,
        request.path,
        ctx.request_id,
        exc_info=exc,
    )
    return error_response(DejaError("internal error; see the proxy's log for this request id"), ctx)


def _describe(span: SpanNotes, method: str, ctx: RequestContext, status: int) -> None:
    """The request and what happened to it, on its span, set at its end so that nothing is
    built for a span that is not recording (tracing off: every request passes here)."""
    if not span.is_recording():
        return
    span.set_attribute("http.method", method)
    span.set_attribute("deja.route", ctx.route)
    span.set_attribute("http.status_code", status)
    span.set_attribute("deja.request_id", ctx.request_id)
    for key, value in (
        ("deja.cache", ctx.cache),
        ("deja.tier", ctx.tier),
        ("deja.match", ctx.match),
        ("deja.similarity", ctx.similarity),
        ("deja.degraded", ctx.degraded),
        ("deja.entry", ctx.entry_id),
    ):
        if value is not None:
            span.set_attribute(key, str(value) if key == "deja.cache" else value)
    if ctx.coalesced:
        span.set_attribute("deja.coalesced", True)


def _stamp(response: web.StreamResponse, ctx: RequestContext) -> None:
    """Headers every response carries, whichever code path made it."""
    headers = response.headers
    if "X-Request-Id" not in headers:  # responses built from ctx.cache_headers() have it
        headers["X-Request-Id"] = ctx.request_id
    if ctx.route in _CACHED_ROUTES and "X-Deja-Cache" not in headers:
        headers["X-Deja-Cache"] = str(ctx.cache or CacheOutcome.BYPASS)
