"""The structured access log: one JSON line per request.

Lines carry no prompt text and no keys: the tenant is its keyed hash. The request ledger hands
this log finished requests in batches, so the log writes (and flushes) once per batch rather
than once per request: Python's logging would cost tens of microseconds a line, a large share of
a cache hit's whole cost at thousands of hits a second.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, BinaryIO

import orjson

from proxy.http.request_context import CacheOutcome, RequestContext

_log = logging.getLogger("deja.access")


def access_record(
    method: str, ctx: RequestContext, status: int, elapsed_s: float, finished_at_s: float
) -> dict[str, Any]:
    """One request's line: only the fields that are present."""
    # Rounded half up by hand: round(x, n) costs a quarter of building the whole line.
    record: dict[str, Any] = {
        "ts": int(finished_at_s * 1000 + 0.5) / 1000,
        "request_id": ctx.request_id,
        "method": method,
        "route": ctx.route,
        "status": status,
        "latency_ms": int(elapsed_s * 100_000 + 0.5) / 100,
    }
    if ctx.tenant:
        record["tenant"] = ctx.tenant
    cache = ctx.cache
    if cache is not None:
        record["cache"] = cache.value
        if ctx.tier is not None:
            record["tier"] = ctx.tier
            record["match"] = ctx.match
        if ctx.entry_id is not None:
            record["entry"] = ctx.entry_id
        if ctx.inputs_cached is not None:
            record["inputs_cached"] = ctx.inputs_cached[0]
            record["inputs"] = ctx.inputs_cached[1]
        if cache is not CacheOutcome.HIT:
            if ctx.degraded is not None:
                record["degraded"] = ctx.degraded
            if ctx.coalesced:
                record["coalesced"] = True
            if ctx.upstream_status is not None:
                record["upstream_status"] = ctx.upstream_status
    if ctx.error_code is not None:
        record["error"] = ctx.error_code
    return record


class AccessLog:
    enabled = True

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream  # bytes: orjson's output goes out without a decode

    def write_lines(self, records: Sequence[dict[str, Any]]) -> None:
        if not records:
            return
        try:
            self._stream.write(b"\n".join(map(orjson.dumps, records)) + b"\n")
            self._stream.flush()
        except (OSError, ValueError) as exc:  # a full disk, a closed stream: serving goes on
            _log.warning("access log: %d lines not written: %s", len(records), exc)


class NoAccessLog:
    """The access log turned off."""

    enabled = False

    def write_lines(self, records: Sequence[dict[str, Any]]) -> None:
        return None
