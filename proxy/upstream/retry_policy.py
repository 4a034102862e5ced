"""When an upstream call is tried again, and how long to wait first.

One attempt count (`upstream.max_retries` retries) covers every kind of retry:

- a connection failure, or a 500/502/503/504: the jittered exponential backoff
  (`retry_backoff_s`, doubling, at most `retry_backoff_max_s`);
- a rate-limit 429: the wait its `retry-after-ms` (OpenAI's, finer; preferred when both are
  there) or `Retry-After` (RFC 9110 §10.2.3: delta-seconds or an HTTP date) asks for, else the
  backoff. A wait longer than `retry_after_max_s` is not waited out: the 429 goes to the client
  at once, its headers with it, so that the client can decide (0: 429s are never retried).
  A 429 whose error code is `insufficient_quota` is final (the account is out of credit;
  waiting changes nothing): see `quota_exhausted`;
- anything else (other 4xx, 2xx) is final; timeouts are not retried (each already cost its
  whole budget).

The policy only decides; `UpstreamClient.open` runs the attempts, and the gate makes the waits
happen outside the admission slot.
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import Mapping

import orjson

from core.clock import Clock
from core.config import UpstreamConfig

RETRY_STATUSES = frozenset({500, 502, 503, 504})
RATE_LIMITED = 429


class RetryPolicy:
    def __init__(self, config: UpstreamConfig, clock: Clock, rng: random.Random) -> None:
        self._config = config
        self._clock = clock
        self._rng = rng

    def attempts(self, retry: bool) -> int:
        """Attempts a call may make; `retry` false for calls that are not safe to repeat."""
        return self._config.max_retries + 1 if retry else 1

    def backoff_s(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (0 for the first)."""
        cfg = self._config
        ceiling = min(cfg.retry_backoff_max_s, cfg.retry_backoff_s * (2**attempt))
        return self._rng.uniform(ceiling / 2, ceiling)

    def wait_s(self, attempt: int, status: int, headers: Mapping[str, str]) -> float | None:
        """The wait before trying again after a response with `status`; None: it is final.
        A 429 that gets a wait here is still final when `quota_exhausted` says so."""
        if status in RETRY_STATUSES:
            return self.backoff_s(attempt)
        cap_s = self._config.retry_after_max_s
        if status != RATE_LIMITED or cap_s <= 0:
            return None
        asked_s = retry_after_s(headers, self._clock.time())
        wait_s = self.backoff_s(attempt) if asked_s is None else asked_s
        return wait_s if wait_s <= cap_s else None


def retry_after_s(headers: Mapping[str, str], now_s: float) -> float | None:
    """The wait a response asks for, in seconds (an HTTP date already past: 0), or None when it
    names none that can be read. `now_s` is wall-clock time, what HTTP dates are measured in."""
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 9110: an HTTP date is in GMT, whatever it says
        return None
    return max(0.0, when.timestamp() - now_s)


def quota_exhausted(body: bytes) -> bool:
    """Whether a 429's body is OpenAI's `insufficient_quota` error (out of credit, not a rate
    limit): `{"error": {"code": "insufficient_quota", ...}}` (some servers put it in `type`)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    error = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(error, dict):
        return False
    return "insufficient_quota" in (error.get("code"), error.get("type"))


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
