"""RetryPolicy: which upstream answers are tried again, and after how long."""

from __future__ import annotations

import email.utils
import random

import pytest

from core.clock import ManualClock
from core.config import UpstreamConfig
from proxy.upstream.retry_policy import RetryPolicy, quota_exhausted, retry_after_s

NOW_S = 1_700_000_000.0


def policy(**upstream: float) -> RetryPolicy:
    config = UpstreamConfig(retry_backoff_s=0.2, retry_backoff_max_s=2.0, **upstream)  # type: ignore[arg-type]
    return RetryPolicy(config, ManualClock(wall_start_s=NOW_S), random.Random(7))


def http_date(at_s: float) -> str:
    return email.utils.formatdate(at_s, usegmt=True)


@pytest.mark.parametrize(
    "headers,wait_s",
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": " 1.5 "}, 1.5),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "7"}, 0.25),  # the finer one wins
        ({"retry-after-ms": "soon", "retry-after": "7"}, 7.0),
        ({"retry-after": http_date(NOW_S + 4)}, 4.0),
        ({"retry-after": http_date(NOW_S - 30)}, 0.0),  # already past: at once
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 -0000"}, None),  # not GMT: unreadable
        ({"retry-after": "-1"}, None),
        ({"retry-after": "later"}, None),
        ({"retry-after": "inf"}, None),
        ({}, None),
    ],
)
def test_the_wait_a_response_asks_for(headers: dict[str, str], wait_s: float | None) -> None:
    assert retry_after_s(headers, NOW_S) == wait_s


def test_a_429_waits_what_it_asks_up_to_the_cap() -> None:
    p = policy(retry_after_max_s=10.0)
    assert p.wait_s(0, 429, {"retry-after": "10"}) == 10.0
    assert p.wait_s(0, 429, {"retry-after": http_date(NOW_S + 2)}) == 2.0
    assert p.wait_s(0, 429, {"retry-after": "11"}) is None  # past the cap: the client's
    assert p.wait_s(0, 429, {"retry-after-ms": "10001"}) is None


def test_a_429_without_a_wait_gets_the_backoff() -> None:
    p = policy(retry_after_max_s=10.0)
    for attempt, ceiling_s in ((0, 0.2), (1, 0.4), (2, 0.8), (5, 2.0)):
        wait_s = p.wait_s(attempt, 429, {"retry-after": "whenever"})
        assert wait_s is not None and ceiling_s / 2 <= wait_s <= ceiling_s


def test_a_cap_of_zero_never_retries_a_429() -> None:
    p = policy(retry_after_max_s=0.0)
    assert p.wait_s(0, 429, {"retry-after": "0"}) is None
    assert p.wait_s(0, 429, {}) is None
    assert p.wait_s(0, 503, {}) is not None  # 5xx retries are not the cap's


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_get_the_backoff_whatever_they_ask(status: int) -> None:
    wait_s = policy().wait_s(0, status, {"retry-after": "60"})
    assert wait_s is not None and 0.1 <= wait_s <= 0.2


@pytest.mark.parametrize("status", [200, 400, 401, 404, 408, 409, 422, 501])
def test_other_statuses_are_final(status: int) -> None:
    assert policy().wait_s(0, status, {"retry-after": "1"}) is None


def test_attempts_count_every_kind_of_retry_together() -> None:
    p = policy(max_retries=3)
    assert (p.attempts(retry=True), p.attempts(retry=False)) == (4, 1)


@pytest.mark.parametrize(
    "body,exhausted",
    [
        (b'{"error": {"code": "insufficient_quota", "type": "insufficient_quota"}}', True),
        (b'{"error": {"code": null, "type": "insufficient_quota"}}', True),
        (b'{"error": {"code": "rate_limit_exceeded", "type": "requests"}}', False),
        (b'{"error": "insufficient_quota"}', False),
        (b"[1, 2]", False),
        (b"Too Many Requests", False),
        (b"", False),
    ],
)
def test_only_an_insufficient_quota_error_is_final(body: bytes, exhausted: bool) -> None:
    assert quota_exhausted(body) is exhausted
