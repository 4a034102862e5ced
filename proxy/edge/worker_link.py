"""The edge's connection to its worker: requests relayed verbatim, over a unix socket to the
worker process it started, or over TCP to a pool of shared workers (one protocol, HTTP/1.1, on
two transports).

Edge mode (proxy/edge/front.py) answers exact hits itself and hands every other request to the
worker, which runs the whole proxy. The worker's answer comes back unchanged: its status, its
headers (the X-Deja-* ones included: the worker decided what happened) and its body, streamed
chunk by chunk when it has no length (SSE), so a streamed miss reaches the client as the model
writes it. Bodies are not decompressed on the way.

The edge sends the request id it assigned as X-Request-Id, so the worker uses the same one and
feedback naming it finds the right record, and, when it traces, its own span's trace context
in place of the client's (`traceparent`), so the worker's spans nest under the front's; over
TCP, the shared secret as X-Deja-Edge-Secret (proxy/edge/worker_guard.py checks it; the
upstream never sees an X-Deja-* header). Nothing else is added: the worker, and the upstream
after it, see the client's request as the client sent it.

Over TCP a request goes to the next worker address (proxy/edge/worker_pool.py); one that cannot
be connected to, or drops the connection before answering, is skipped for a while and the next
is tried. When none is left, `WorkerUnreachable`: nothing reached a worker, and the front may
answer without one.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp import web

from core.errors import WorkerUnavailable, WorkerUnreachable
from core.tracing import TRACE_HEADERS
from proxy.edge.worker_guard import REFUSED_HEADER, SECRET_HEADER
from proxy.edge.worker_pool import WorkerPool, WorkerTarget
from proxy.http.request_context import RequestContext
from proxy.protocol.credentials import spelled_alike

# The host part of the URLs sent over the socket: any name would do.
_WORKER = "http://deja-worker"
# Hop-by-hop headers (RFC 9110 7.6.1) and what the client library sets itself.
_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "content-length"}
)
_NOT_SENT = _HOP | {"host", "x-request-id", SECRET_HEADER.lower()}
_NOT_RETURNED = _HOP | {"date", "server"}
# A connection that could not be made in time, or was reset or dropped before any answer (a
# worker killed while its pooled connection idled): no worker will answer this request, and
# another may. (A worker killed after it had begun the request is the one case where the
# request then runs twice: as a load balancer retrying a reset connection would.)
_NOT_CONNECTED = (
    aiohttp.ClientOSError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ConnectionTimeoutError,
)


@dataclass(frozen=True, slots=True)
class Hop:
    """Where one attempt goes: the URL prefix, and the TLS server name to check."""

    base_url: str
    server_hostname: str | None = None
    target: WorkerTarget | None = None


class WorkerRoute(Protocol):
    """The transport under the link: how to connect, and where each attempt goes."""

    shared: bool  # shared workers over TCP (the front may answer without them)

    def connector(self) -> aiohttp.BaseConnector: ...

    def connect_timeout_s(self) -> float: ...

    def hops(self) -> list[Hop]: ...

    def headers(self) -> list[tuple[str, str]]: ...

    def failed(self, hop: Hop, why: str) -> None: ...

    def succeeded(self, hop: Hop) -> None: ...


class UnixRoute:
    """The worker process the front started, on a socket in a private directory."""

    shared = False

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path

    def connector(self) -> aiohttp.BaseConnector:
        return aiohttp.UnixConnector(path=self.socket_path, limit=0)

    def connect_timeout_s(self) -> float:
        return 5.0

    def hops(self) -> list[Hop]:
        return [Hop(_WORKER)]

    def headers(self) -> list[tuple[str, str]]:
        return []

    def failed(self, hop: Hop, why: str) -> None:
        pass  # the one worker: a front whose worker exits stops too

    def succeeded(self, hop: Hop) -> None:
        pass


class TcpRoute:
    """Shared workers: `pool`'s addresses, the secret on every request, TLS when `tls` is
    given (the workers' certificates checked against its CA, for the name configured)."""

    shared = True

    def __init__(
        self,
        pool: WorkerPool,
        secret: str,
        tls: ssl.SSLContext | None,
        connect_timeout_s: float,
    ) -> None:
        self.pool = pool
        self._secret = secret
        self._tls = tls
        self._scheme = "https" if tls is not None else "http"
        self._connect_timeout_s = connect_timeout_s

    def connector(self) -> aiohttp.BaseConnector:
        # keepalive below the worker's own (aiohttp's server closes idle ones after 75 s).
        return aiohttp.TCPConnector(limit=0, ssl=self._tls or False, keepalive_timeout=30)

    def connect_timeout_s(self) -> float:
        return self._connect_timeout_s

    def hops(self) -> list[Hop]:
        # Connected by address; over TLS the certificate is checked for the name configured.
        tls = self._tls is not None
        return [
            Hop(t.base_url(self._scheme), t.name if tls else None, t) for t in self.pool.targets()
        ]

    def headers(self) -> list[tuple[str, str]]:
        return [(SECRET_HEADER, self._secret)]

    def failed(self, hop: Hop, why: str) -> None:
        assert hop.target is not None
        self.pool.failed(hop.target, why)

    def succeeded(self, hop: Hop) -> None:
        assert hop.target is not None
        self.pool.succeeded(hop.target)


def client_tls(ca_file: str) -> ssl.SSLContext:
    """A front's TLS to its workers: their certificates checked against `ca_file`."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class WorkerLink:
    def __init__(self, route: WorkerRoute) -> None:
        self.route = route
        self._session: aiohttp.ClientSession | None = None

    @property
    def shared(self) -> bool:
        return self.route.shared

    @property
    def pool(self) -> WorkerPool | None:
        """The shared workers' addresses (resolved again while the front runs)."""
        return self.route.pool if isinstance(self.route, TcpRoute) else None

    async def start(self) -> None:
        if self.pool is not None:
            await self.pool.refresh()
        self._session = aiohttp.ClientSession(
            connector=self.route.connector(),
            # The worker applies the upstream's timeouts itself; a stream may run for minutes.
            timeout=aiohttp.ClientTimeout(
                total=None,
                connect=self.route.connect_timeout_s() * 2,
                sock_connect=self.route.connect_timeout_s(),
            ),
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
        self,
        request: web.Request,
        ctx: RequestContext,
        body: bytes | AsyncIterable[bytes],
        trace: Mapping[str, str],
    ) -> web.StreamResponse:
        """`request` answered by the worker; its body is `body`, read already, or streamed on
        as the worker takes it (Content-Length, when the client declared one, goes with it);
        `trace`: the front's trace context headers (StageTracer.outgoing_headers, {} when not
        tracing)."""
        # Credentials arrive as the front read them: the worker derives the same tenant.
        not_sent = _NOT_SENT | TRACE_HEADERS if trace else _NOT_SENT
        headers = spelled_alike(
            (k, v) for k, v in request.headers.items() if k.lower() not in not_sent
        )
        headers.append(("X-Request-Id", ctx.request_id))
        headers += trace.items()
        if not isinstance(body, bytes) and request.content_length is not None:
            headers.append(("Content-Length", str(request.content_length)))
        data = body if body or request.method not in ("GET", "HEAD") else None
        reply = await self._send(request.method, request.path_qs, headers, data)
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
        headers = [("Content-Type", "application/json")]
        reply = await self._send("POST", path, headers, payload)
        try:
            await reply.read()
        except aiohttp.ClientError as exc:
            raise WorkerUnavailable(f"the worker's answer broke off: {exc}") from None
        finally:
            reply.release()
        if reply.status != 200:
            raise WorkerUnavailable(f"the worker refused {path}: HTTP {reply.status}")

    async def _send(
        self,
        method: str,
        path_qs: str,
        headers: list[tuple[str, str]],
        data: bytes | AsyncIterable[bytes] | None,
    ) -> aiohttp.ClientResponse:
        """The reply's status and headers from the first worker that answers. A streamed body
        goes to the next worker only if the last one was never connected to (it was not read);
        one a worker refused after reading it cannot be sent again."""
        session = self._open_session()
        hops = self.route.hops()
        if not hops:
            raise WorkerUnreachable("no worker is reachable (each failed lately; retried soon)")
        sent = [*headers, *self.route.headers()]
        why = ""
        for hop in hops:
            try:
                reply = await session.request(
                    method,
                    hop.base_url + path_qs,
                    data=data,
                    headers=sent,
                    allow_redirects=False,
                    server_hostname=hop.server_hostname,
                )
            except _NOT_CONNECTED as exc:
                why = str(exc) or type(exc).__name__
                self.route.failed(hop, why)
                continue
            except (aiohttp.ClientConnectionError, OSError) as exc:
                raise WorkerUnavailable(f"the worker is not answering: {exc}") from None
            if reply.headers.get(REFUSED_HEADER):
                reply.release()
                why = "it refused this front's edge.shared_secret: the secrets differ"
                self.route.failed(hop, why)
                if not isinstance(data, (bytes, type(None))):
                    break  # the body went with the refused request
                continue
            self.route.succeeded(hop)
            return reply
        raise WorkerUnreachable(f"the worker process is not answering: {why}")
