"""Deja's one error tree.

Foreign exceptions (aiohttp, redis-py, json, torch) are translated into these at one choke point per
seam: `proxy/upstream/aiohttp_transport.py` for the model server (its timeouts in
`proxy/upstream/client.py`), `tiers/redis_tier.py` for Redis,
`proxy/http/openai_routes.py` for request bodies, `proxy/edge/worker_link.py` for edge mode's
worker, `proxy/cli/admin_client.py` (its `AdminError`) for the admin API as the CLI sees it.
Expected outcomes (a miss, an expired entry) are return values, never exceptions.

Every error that can reach a client knows its HTTP status and OpenAI error `type`, so the route
layer turns any of them into `{"error": {"message", "type", "code", "param"}}` the same way.
"""

from __future__ import annotations


class DejaError(Exception):
    """Root of every error Deja raises on purpose."""

    status: int = 500
    error_type: str = "server_error"
    code: str | None = None
    # The request parameter at fault, as OpenAI names it (`messages[0].content`), or None.
    param: str | None = None

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if param is not None:
            self.param = param


class ConfigError(DejaError):
    """The configuration is invalid; raised at start-up, never while serving."""

    code = "invalid_config"


# --- client errors -------------------------------------------------------------------------


class InvalidRequest(DejaError):
    """400: bad JSON, wrong or missing fields."""

    status = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class MethodNotAllowed(InvalidRequest):
    status = 405
    code = "method_not_allowed"


class NotFound(InvalidRequest):
    status = 404
    code = "not_found"


class BodyTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"


class AuthenticationFailed(DejaError):
    status = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class RateLimited(DejaError):
    """429: admission control refused the request; `retry_after_s` goes into Retry-After."""

    status = 429
    error_type = "rate_limit_error"
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


# --- upstream errors -----------------------------------------------------------------------


class UpstreamError(DejaError):
    """The model server could not give an answer (nothing to do with the client's input)."""

    status = 502
    error_type = "upstream_error"
    code = "upstream_unreachable"


class UpstreamUnreachable(UpstreamError):
    status = 502
    code = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamProtocolError(UpstreamError):
    """The upstream answered, but not in the OpenAI wire format (bad JSON, broken SSE)."""

    status = 502
    code = "upstream_bad_response"


class BreakerOpen(UpstreamError):
    """503: the circuit breaker is open and there is nothing cached to serve."""

    status = 503
    code = "upstream_circuit_open"

    def __init__(self, message: str, *, retry_after_s: int, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


# --- storage errors (never reach clients: tiers degrade instead) ---------------------------


class WorkerUnavailable(DejaError):
    """Edge mode: the worker process cannot be reached (starting, restarting, or gone)."""

    status = 503
    code = "worker_unavailable"


class WorkerUnreachable(WorkerUnavailable):
    """Edge mode: no worker could be connected to (refused, timed out, or skipped while it
    keeps failing), so nothing of the request reached one and it may go elsewhere."""


class TierUnavailable(DejaError):
    """A storage backend (Redis) is unreachable. The cache service skips the tier and goes on."""

    status = 503
    code = "tier_unavailable"


class CorruptEntry(DejaError):
    """A stored record could not be decoded (wrong version, truncated). Treated as absent."""

    code = "corrupt_entry"


class SnapshotUnreadable(DejaError):
    """A partition's index snapshot on disk could not be read (damaged, another format). The
    partition is rebuilt from Redis instead."""

    code = "snapshot_unreadable"
