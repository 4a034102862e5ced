"""The edge's connection to its worker process: requests relayed verbatim over a unix socket.

Edge mode (proxy/edge/front.py) answers exact hits itself and hands every other request to the
worker, which runs the whole proxy. The worker's answer comes back unchanged: its status, its
headers (the X-Deja-* ones included: the worker decided what happened) and its body, streamed
chunk by chunk when it has no length (SSE), so a streamed miss reaches the client as the model
writes it. Bodies are not decompressed on the way.

The edge sends the request id it assigned as X-Request-Id, so the worker uses the same one and
feedback naming it finds the right record, and, when it traces, its own span's trace context
in place of the client's (`traceparent`), so the worker's spans nest under the front's.
Nothing else is added: the worker, and the upstream after it, see the client's request as the
client sent it.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from aiohttp import web

from core.errors import WorkerUnavailable
from core.tracing import TRACE_HEADERS
from proxy.http.request_context import RequestContext
from proxy.protocol.credentials import spelled_alike

# The host part of the URLs sent over the socket: any name would do.
_WORKER = "http://deja-worker"
# Hop-by-hop headers (RFC 9110 7.6.1) and what the client library sets itself.
_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "content-length"}
)
_NOT_SENT = _HOP | {"host", "x-request-id"}
_NOT_RETURNED = _HOP | {"date", "server"}


class WorkerLink:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=self.socket_path, limit=0),
            # The worker applies the upstream's timeouts itself; a stream may run for minutes.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise WorkerUnavailable("the edge is not connected to its worker")
        return self._session

    async def forward(
        self, request: web.Request, ctx: RequestContext, body: bytes, trace: Mapping[str, str]
    ) -> web.StreamResponse:
        """`request` (whose body, already read, is `body`) answered by the worker; `trace`: the
        front's trace context headers (StageTracer.outgoing_headers, {} when not tracing)."""
        # Credentials arrive as the front read them: the worker derives the same tenant.
        not_sent = _NOT_SENT | TRACE_HEADERS if trace else _NOT_SENT
        headers = spelled_alike(
            (k, v) for k, v in request.headers.items() if k.lower() not in not_sent
        )
        headers.append(("X-Request-Id", ctx.request_id))
        headers += trace.items()
        try:
            reply = await self._open_session().request(
                request.method,
                _WORKER + request.path_qs,
                data=body if body or request.method not in ("GET", "HEAD") else None,
                headers=headers,
                allow_redirects=False,
            )
        except (aiohttp.ClientConnectionError, OSError) as exc:
            raise WorkerUnavailable(f"the worker process is not answering: {exc}") from None
        ctx.relayed = True  # the worker answered it, and counts it; the front does not
        try:
            returned = {k: v for k, v in reply.headers.items() if k.lower() not in _NOT_RETURNED}
            if reply.content_length is not None or request.method == "HEAD":
                try:
                    body = await reply.read()
                except aiohttp.ClientError as exc:
                    raise WorkerUnavailable(f"the worker's answer broke off: {exc}") from None
                return web.Response(status=reply.status, body=body, headers=returned)
            response = web.StreamResponse(status=reply.status, headers=returned)
            await response.prepare(request)
            try:
                async for chunk in reply.content.iter_any():
                    await response.write(chunk)
            except aiohttp.ClientError:
                # The worker went away mid-stream: end the client's stream where it broke off
                # (its events so far were the worker's; there is nobody left to finish it).
                raise ConnectionResetError("the worker's stream broke off") from None
            await response.write_eof()
            return response
        finally:
            reply.release()

    async def post(self, path: str, payload: bytes) -> None:
        """An internal call (the edge's report); WorkerUnavailable unless the worker took it."""
        try:
            async with self._open_session().post(
                _WORKER + path, data=payload, headers={"Content-Type": "application/json"}
            ) as reply:
                await reply.read()
                if reply.status != 200:
                    raise WorkerUnavailable(f"the worker refused {path}: HTTP {reply.status}")
        except (aiohttp.ClientConnectionError, OSError) as exc:
            raise WorkerUnavailable(f"the worker process is not answering: {exc}") from None
