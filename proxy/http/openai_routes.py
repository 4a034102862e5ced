"""The OpenAI-compatible surface: cached completion routes and the uncached pass-through.

POST /v1/chat/completions   cached (exact, lemma and semantic matches)
POST /v1/completions        cached (exact matches only)
POST /v1/responses          cached (exact, lemma and semantic matches; background: passed through)
POST /v1/embeddings         cached input by input, exactly (proxy/http/embeddings.py)
*    /v1/{anything else}    passed through to the upstream unchanged, X-Deja-Cache: bypass
                            (GET /v1/models among them)
"""

from __future__ import annotations

from collections.abc import Awaitable

from aiohttp import web

from core.errors import UpstreamError
from normalize.keys.request import Route
from proxy.http.body import StreamedBody, read_body
from proxy.http.client_auth import ClientAuth
from proxy.http.completions import CompletionHandler
from proxy.http.embeddings import EmbeddingsHandler
from proxy.http.frame import RequestFrame
from proxy.http.request_context import CONTEXT, CacheOutcome, RequestContext
from proxy.upstream.client import RequestBody, UpstreamClient, UpstreamRequest

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
        embeddings: EmbeddingsHandler,
        upstream: UpstreamClient,
        auth: ClientAuth,
        max_passthrough_bytes: int,
    ) -> None:
        self._completions = completions
        self._embeddings = embeddings
        self._upstream = upstream
        self._auth = auth
        self._max_passthrough_bytes = max_passthrough_bytes

    def register(self, frame: RequestFrame) -> None:
        frame.route("/v1/chat/completions", "chat", self.chat_completions, methods=["POST"])
        frame.route("/v1/completions", "completions", self.completions, methods=["POST"])
        frame.route("/v1/responses", "responses", self.responses, methods=["POST"])
        frame.route("/v1/embeddings", "embeddings", self._embeddings.handle, methods=["POST"])
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
        # Only reads are safe to repeat: a POST that reached the upstream must not run twice.
        # A read's body (rarely any) is read whole, so it can be resent; any other body streams
        # through as the upstream takes it, never whole in memory (a file upload).
        safe = request.method in ("GET", "HEAD", "OPTIONS")
        # A request without a body (a DELETE, a cancel) is sent without one, not as an empty
        # chunked stream.
        streams = not safe and request.body_exists
        streamed = StreamedBody(request, self._max_passthrough_bytes) if streams else None
        body: RequestBody = (
            streamed
            if streamed is not None
            else await read_body(request, self._max_passthrough_bytes)
        )
        return await send_upstream(request, ctx, self._upstream, self._auth, body, retry=safe)


async def send_upstream(
    request: web.Request,
    ctx: RequestContext,
    upstream: UpstreamClient,
    auth: ClientAuth,
    body: RequestBody,
    *,
    retry: bool,
) -> web.StreamResponse:
    """`request` (a /v1/ route; its body read whole, or a StreamedBody that goes on as the
    upstream takes it) sent to the upstream uncached, its answer streamed back as it came with
    `ctx`'s headers (the pass-through, and edge mode's front while no worker answers)."""
    headers = auth.upstream_headers(request.headers, _NOT_FORWARDED)
    streamed = body if isinstance(body, StreamedBody) else None
    if streamed is not None and request.content_length is not None:
        # A declared length goes on (aiohttp would otherwise send the stream chunked, which
        # not every upstream takes for an upload).
        headers.append(("Content-Length", str(request.content_length)))
    tail = request.path.removeprefix("/v1/")
    upstream_request = UpstreamRequest(
        request.method, tail, tuple(headers), body, request.query_string
    )
    try:
        reply = await upstream.open(upstream_request, retry=retry)
    except UpstreamError:
        # The body stopping at the limit breaks the upload: the client's fault, not the
        # upstream's.
        if streamed is not None and streamed.too_large:
            raise streamed.refusal() from None
        raise
    try:
        ctx.upstream_status = reply.status
        relayed = {k: v for k, v in reply.headers.items() if k.lower() not in _NOT_RELAYED}
        relayed.update(ctx.cache_headers())
        response = web.StreamResponse(status=reply.status, headers=relayed)
        await response.prepare(request)
        async for chunk in reply.iter_chunks():
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        reply.release()
