"""The OpenAI-compatible surface: cached completion routes and the uncached pass-through.

POST /v1/chat/completions   cached (exact, lemma and semantic matches)
POST /v1/completions        cached (exact matches only)
POST /v1/responses          cached (exact, lemma and semantic matches; background: passed through)
*    /v1/{anything else}    passed through to the upstream unchanged, X-Deja-Cache: bypass
                            (GET /v1/models among them)
"""

from __future__ import annotations

from collections.abc import Awaitable

from aiohttp import web

from core.errors import BodyTooLarge
from normalize.keys.request import Route
from proxy.http.client_auth import ClientAuth
from proxy.http.completions import CompletionHandler
from proxy.http.frame import RequestFrame
from proxy.http.request_context import CONTEXT, CacheOutcome
from proxy.upstream.client import UpstreamClient, UpstreamRequest

# The client's credentials go upstream as ClientAuth decides (unchanged, or replaced).
_NOT_FORWARDED = frozenset({"accept-encoding"})
_NOT_RELAYED = frozenset(
    {
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "date",
        "server",
        "x-request-id",
    }
)


class OpenAIRoutes:
    def __init__(
        self,
        completions: CompletionHandler,
        upstream: UpstreamClient,
        auth: ClientAuth,
        max_passthrough_bytes: int,
    ) -> None:
        self._completions = completions
        self._upstream = upstream
        self._auth = auth
        self._max_passthrough_bytes = max_passthrough_bytes

    def register(self, frame: RequestFrame) -> None:
        frame.route("/v1/chat/completions", "chat", self.chat_completions, methods=["POST"])
        frame.route("/v1/completions", "completions", self.completions, methods=["POST"])
        frame.route("/v1/responses", "responses", self.responses, methods=["POST"])
        frame.route("/v1/{tail:.*}", "passthrough", self.passthrough)

    # Plain functions returning the handler's coroutine: one coroutine less on every hit.
    def chat_completions(self, request: web.Request) -> Awaitable[web.StreamResponse]:
        return self._completions.handle(request, Route.CHAT, request[CONTEXT])

    def completions(self, request: web.Request) -> Awaitable[web.StreamResponse]:
        return self._completions.handle(request, Route.COMPLETIONS, request[CONTEXT])

    def responses(self, request: web.Request) -> Awaitable[web.StreamResponse]:
        return self._completions.handle(request, Route.RESPONSES, request[CONTEXT])

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        ctx = request[CONTEXT]
        ctx.cache = CacheOutcome.BYPASS
        self._auth.credentials(request.headers)
        body = await self._read_body(request)
        headers = self._auth.upstream_headers(request.headers, _NOT_FORWARDED)
        upstream_request = UpstreamRequest(
            request.method, request.match_info["tail"], tuple(headers), body, request.query_string
        )
        # Only reads are safe to repeat: a POST that reached the upstream must not run twice.
        safe = request.method in ("GET", "HEAD", "OPTIONS")
        upstream = await self._upstream.open(upstream_request, retry=safe)
        try:
            ctx.upstream_status = upstream.status
            relayed = {k: v for k, v in upstream.headers.items() if k.lower() not in _NOT_RELAYED}
            relayed.update(ctx.cache_headers())
            response = web.StreamResponse(status=upstream.status, headers=relayed)
            await response.prepare(request)
            async for chunk in upstream.iter_chunks():
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            upstream.release()

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self._max_passthrough_bytes
        if request.content_length is not None and request.content_length > limit:
            raise BodyTooLarge(
                f"request body is {request.content_length} bytes; the limit is {limit}"
            )
        body = bytearray()
        async for chunk in request.content.iter_chunked(256 * 1024):
            body += chunk
            if len(body) > limit:
                raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        return bytes(body)
