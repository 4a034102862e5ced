"""The request ledger: finished requests reach the metrics and the access log, in batches."""

from __future__ import annotations

import asyncio
import io
import itertools
import time

import orjson

from core.pacing import LoopTurns
from proxy.http.access_log import AccessLog, NoAccessLog
from proxy.http.finished_requests import RequestLedger
from proxy.http.request_context import CacheOutcome, RequestContext
from tests.support.waiting import wait_until


class Observed:
    """The metrics seam: what the ledger reported, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, float]] = []

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        self.calls.append((route, cache, status, seconds))


def hit(request_id: str) -> RequestContext:
    ctx = RequestContext(request_id, "chat", 0.0, tenant="t-hash")
    ctx.cache, ctx.tier, ctx.match, ctx.entry_id = CacheOutcome.HIT, "lru_k", "exact", "ab-cd"
    return ctx


def lines(stream: io.BytesIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


async def test_a_drain_observes_and_logs_every_recorded_request() -> None:
    observed, stream = Observed(), io.BytesIO()
    ledger = RequestLedger(observed, AccessLog(stream), interval_s=60)
    ledger.record("POST", hit("r1"), 200, 0.0015)
    miss = RequestContext("r2", "chat", 0.0, cache=CacheOutcome.MISS, upstream_status=502)
    ledger.record("POST", miss, 502, 0.25)
    ledger.record("GET", RequestContext("r3", "healthz", 0.0), 200, 0.0001)
    assert observed.calls == [] and stream.getvalue() == b""  # nothing until the batch drains

    ledger.drain()
    assert observed.calls == [
        ("chat", "hit", 200, 0.0015),
        ("chat", "miss", 502, 0.25),
        ("healthz", "none", 200, 0.0001),
    ]
    first, second, third = lines(stream)
    assert {k: first[k] for k in ("request_id", "method", "status", "cache", "tier", "entry")} == {
        "request_id": "r1",
        "method": "POST",
        "status": 200,
        "cache": "hit",
        "tier": "lru_k",
        "entry": "ab-cd",
    }
    assert first["latency_ms"] == 1.5 and first["tenant"] == "t-hash"
    assert second["upstream_status"] == 502 and "upstream_status" not in first
    assert "cache" not in third and "tenant" not in third

    ledger.drain()  # nothing new: nothing observed or written twice
    assert len(observed.calls) == 3 and len(lines(stream)) == 3


async def test_a_line_is_stamped_with_the_wall_clock_time_its_request_finished() -> None:
    stream = io.BytesIO()
    ledger = RequestLedger(Observed(), AccessLog(stream), interval_s=60)
    # Started 2 s ago on the monotonic clock, took 0.5 s: it finished 1.5 s ago.
    ledger.record("POST", RequestContext("r1", "chat", time.monotonic() - 2.0), 200, 0.5)
    ledger.drain()
    (line,) = lines(stream)
    assert abs(float(str(line["ts"])) - (time.time() - 1.5)) < 0.05


async def test_the_batch_drains_by_itself_after_the_interval() -> None:
    observed, stream = Observed(), io.BytesIO()
    ledger = RequestLedger(observed, AccessLog(stream), interval_s=0.01)
    ledger.record("POST", hit("r1"), 200, 0.001)
    await asyncio.sleep(0.05)
    assert len(observed.calls) == 1 and len(lines(stream)) == 1
    ledger.record("POST", hit("r2"), 200, 0.001)  # a later request schedules a new drain
    await asyncio.sleep(0.05)
    assert [line["request_id"] for line in lines(stream)] == ["r1", "r2"]


async def test_the_timed_drain_takes_a_chunk_per_loop_turn() -> None:
    observed, stream = Observed(), io.BytesIO()
    turns = LoopTurns()
    ledger = RequestLedger(observed, AccessLog(stream), interval_s=0, chunk=2, turns=turns)
    for i in range(5):
        ledger.record("POST", hit(f"r{i}"), 200, 0.001)
    counts = [0]
    # This test's own task is ready at every iteration, so each chunk waits out the turn's
    # deferral (2 ms) before it goes: spin until everything is drained.
    deadline = time.monotonic() + 5
    while counts[-1] < 5 and time.monotonic() < deadline:
        await asyncio.sleep(0)
        counts.append(len(observed.calls))
    steps = [b - a for a, b in itertools.pairwise(counts)]
    # Never more than a chunk in one iteration, each chunk a turn of its own; nothing lost.
    assert max(steps) == 2 and counts[-1] == 5
    assert turns.granted == 3
    assert [line["request_id"] for line in lines(stream)] == [f"r{i}" for i in range(5)]


async def test_a_request_recorded_during_the_last_chunk_is_not_stranded() -> None:
    observed = Observed()
    ledger = RequestLedger(observed, NoAccessLog(), interval_s=0.01, chunk=1)
    observe = observed.observe_request

    def observe_and_record(route: str, cache: str, status: int, seconds: float) -> None:
        observe(route, cache, status, seconds)
        if len(observed.calls) == 2:  # r2, the last pending one: r3 finishes meanwhile
            ledger.record("POST", hit("r3"), 200, 0.002)

    observed.observe_request = observe_and_record  # type: ignore[method-assign]
    ledger.record("POST", hit("r1"), 200, 0.001)
    ledger.record("POST", hit("r2"), 200, 0.001)
    await wait_until(lambda: len(observed.calls) == 3, timeout_s=2)
    assert observed.calls[-1] == ("chat", "hit", 200, 0.002)


async def test_close_stops_the_timed_drain_and_drains_what_is_left() -> None:
    observed = Observed()
    ledger = RequestLedger(observed, NoAccessLog(), interval_s=60)
    ledger.record("POST", hit("r1"), 200, 0.001)
    before = {t for t in asyncio.all_tasks() if not t.done()}
    await ledger.close()
    assert observed.calls == [("chat", "hit", 200, 0.001)]
    await asyncio.sleep(0)
    assert {t for t in asyncio.all_tasks() if not t.done()} < before  # the timer task is gone


async def test_a_full_batch_drains_at_once() -> None:
    observed = Observed()
    ledger = RequestLedger(observed, NoAccessLog(), interval_s=60, max_pending=3)
    for i in range(7):
        ledger.record("POST", hit(f"r{i}"), 200, 0.001)
    assert len(observed.calls) == 6  # two full batches; the seventh waits for its interval


async def test_with_the_access_log_off_the_metrics_still_count() -> None:
    observed = Observed()
    ledger = RequestLedger(observed, NoAccessLog(), interval_s=60)
    ledger.record("POST", hit("r1"), 200, 0.001)
    ledger.drain()
    assert observed.calls == [("chat", "hit", 200, 0.001)]


async def test_a_stream_that_cannot_be_written_does_not_fail_the_drain() -> None:
    observed, stream = Observed(), io.BytesIO()
    ledger = RequestLedger(observed, AccessLog(stream), interval_s=60)
    stream.close()
    ledger.record("POST", hit("r1"), 200, 0.001)
    ledger.drain()
    assert observed.calls == [("chat", "hit", 200, 0.001)]
