"""The dashboard in edge mode: the page and its data come through the front, and the worker's
series counts the hits its front answered alone (their latencies included, from its reports)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_edge_mode import EdgeStack, admin, ask, stored
from tests.support.blocking_http import eventually, http

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def stack() -> Iterator[EdgeStack]:
    s = EdgeStack({"DEJA_ADMIN__SERIES_INTERVAL_S": "0.2"})
    yield s
    s.close()


def _hit_totals(points: list[dict[str, Any]]) -> tuple[int, float]:
    hits = sum(p["hits"] for p in points)
    timed = sum(p["latency_s"].get("hit", {}).get("count", 0.0) for p in points)
    return hits, timed


def test_the_workers_series_counts_what_its_front_served(stack: EdgeStack) -> None:
    question = "What is the capital of Portugal?"
    miss = ask(stack.front, question)
    stored(stack.front, miss)
    for _ in range(3):
        assert ask(stack.front, question).headers["X-Deja-Cache"] == "hit"
    eventually(
        lambda: _hit_totals(admin(stack.front, "GET", "series").body["points"]) == (3, 3.0), 10.0
    )
    misses = admin(stack.front, "GET", "misses").body["misses"]
    request_id = {k.lower(): v for k, v in miss.headers.items()}["x-request-id"]
    assert [m["request_id"] for m in misses] == [request_id]

    page = http(stack.front, "GET", "/admin/")
    assert page.status == 200 and b'id="login-form"' in page.raw
    headers = {k.lower(): v for k, v in page.headers.items()}
    assert "script-src 'self'" in headers["content-security-policy"]
    assert http(stack.front, "GET", "/admin/v1/series").status == 401
