"""A shared worker's door: only fronts holding `edge.shared_secret` get in.

A worker listening on TCP (`deja serve --role worker`) is the whole proxy, spending the
upstream key for whoever reaches it, so every request must carry the secret in
X-Deja-Edge-Secret, compared in constant time. Without it: 401, the header
X-Deja-Edge-Refused (so a front with another secret knows its secret, not the request, is at
fault), and one log line naming the peer. The kubelet's probes and Prometheus' scrape
(`GET /healthz`, `/readyz`, `/metrics`) carry no secret and reveal nothing a client could
use, so they are let through, as on any proxy.

The header never goes further: the worker sends no X-Deja-* request header upstream
(proxy/upstream/client.py `forward_headers`), and no credential header may be named X-Deja-*.
"""

from __future__ import annotations

import hmac
import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

SECRET_HEADER = "X-Deja-Edge-Secret"
REFUSED_HEADER = "X-Deja-Edge-Refused"
_OPEN = frozenset({"/healthz", "/readyz", "/metrics"})
# One refusal line per peer this often at most: a scanner must not fill the log.
_LOG_EVERY_S = 10.0
_log = logging.getLogger("deja.edge")


def shared_secret_guard(secret: str) -> Middleware:
    """The middleware refusing every request without `secret`, but the probes and the scrape."""
    expected = secret.encode()
    logged: dict[str, float] = {}

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in ("GET", "HEAD") and request.path in _OPEN:
            return await handler(request)
        given = request.headers.get(SECRET_HEADER)
        if given is not None and hmac.compare_digest(given.encode(), expected):
            return await handler(request)
        peer = request.remote or "?"
        now = time.monotonic()
        if now - logged.get(peer, -_LOG_EVERY_S) >= _LOG_EVERY_S:
            if len(logged) > 1024:
                logged.clear()
            logged[peer] = now
            what = "without" if given is None else "with a wrong"
            _log.warning(
                "refused %s %s from %s: %s edge.shared_secret (header %s)",
                request.method,
                request.path,
                peer,
                what,
                SECRET_HEADER,
            )
        error = {
            "message": "this is a Deja worker: only edge fronts holding its shared secret",
            "type": "authentication_error",
            "code": "edge_secret_refused",
            "param": None,
        }
        return web.json_response({"error": error}, status=401, headers={REFUSED_HEADER: "1"})

    return guard
