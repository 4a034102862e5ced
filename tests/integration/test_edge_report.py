"""Edge mode's report, both ends for real: the front's EdgeReport posts through a WorkerLink over a
unix socket to an aiohttp app holding the worker's EdgeReportReceiver, which applies it to real
counters and served records. Only the request-metrics observer on the worker's side is a
recording stand-in (the seam where Prometheus would be)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from core.errors import WorkerUnavailable
from core.recorder import CacheRecorder
from proxy.answering.feedback import ServedRecord, ServedRequests
from proxy.edge.report import REPORT_PATH, EdgeReport, EdgeReportReceiver
from proxy.edge.worker_link import UnixRoute, WorkerLink
from tests.support.unix_server import UnixServer
from tiers.base import MatchKind


class Observed:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int]] = []

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        self.requests.append((route, cache, status))


class Worker:
    """The worker's side of the socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.observed = Observed()
        self.recorder = CacheRecorder()
        self.served = ServedRequests()
        self._server: UnixServer | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(
            REPORT_PATH, EdgeReportReceiver(self.observed, self.recorder, self.served).handle
        )
        self._server = UnixServer(app, self.socket_path)
        await self._server.start()

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()


@pytest.fixture
async def link(tmp_path: Path) -> AsyncIterator[WorkerLink]:
    link = WorkerLink(UnixRoute(str(tmp_path / "worker.sock")))
    await link.start()
    yield link
    await link.close()


def socket_of(link: WorkerLink) -> str:
    assert isinstance(link.route, UnixRoute)
    return link.route.socket_path


def served_hit(report: EdgeReport, front: CacheRecorder, request_id: str) -> None:
    # What the front's ledger and hit writer hand the report for one hit.
    report.observe_request("chat", "hit", 200, 0.0002)
    report.remember(request_id, ServedRecord("e-1", "t1", MatchKind.EXACT, None))
    front.hit("lru_k", "exact", prompt_tokens=7, completion_tokens=0, usd=0.0)


async def test_what_the_front_served_reaches_the_workers_ledger_counters_and_records(
    link: WorkerLink,
) -> None:
    worker = Worker(socket_of(link))
    await worker.start()
    try:
        front = CacheRecorder()
        report = EdgeReport(link, front, served_enabled=True)
        served_hit(report, front, "r-1")
        report.observe_request("healthz", "none", 200, 0.0001)
        await report.flush()
        assert worker.observed.requests == [("chat", "hit", 200), ("healthz", "none", 200)]
        assert worker.recorder.snapshot().hits == {("lru_k", "exact"): 1}
        assert worker.recorder.snapshot().prompt_tokens_saved == 7
        assert worker.served.get("r-1", "t1") == ServedRecord("e-1", "t1", MatchKind.EXACT, None)
        assert front.snapshot().total_hits == 0  # handed over, not counted twice
        await report.flush()  # nothing new: nothing sent, nothing counted again
        assert worker.recorder.snapshot().hits == {("lru_k", "exact"): 1}
    finally:
        await worker.close()


async def test_a_report_the_worker_cannot_take_yet_is_kept_for_the_next(
    link: WorkerLink,
) -> None:
    front = CacheRecorder()
    report = EdgeReport(link, front, served_enabled=True)
    served_hit(report, front, "r-1")
    await report.flush()  # nobody listens on the socket yet
    assert front.snapshot().hits == {("lru_k", "exact"): 1}  # given back
    worker = Worker(socket_of(link))
    await worker.start()
    try:
        served_hit(report, front, "r-2")
        await report.flush()
        assert worker.observed.requests == [("chat", "hit", 200)] * 2
        assert worker.recorder.snapshot().hits == {("lru_k", "exact"): 2}
        assert worker.served.get("r-1", "t1") is not None
        assert worker.served.get("r-2", "t1") is not None
    finally:
        await worker.close()


async def test_past_max_pending_the_oldest_observations_are_dropped_and_counted(
    link: WorkerLink,
) -> None:
    report = EdgeReport(link, CacheRecorder(), served_enabled=False, max_pending=2)
    for _ in range(3):
        report.observe_request("chat", "hit", 200, 0.0002)
    await report.flush()  # not delivered: kept, still bounded
    report.observe_request("chat", "hit", 200, 0.0002)
    assert report.dropped == 2


async def test_served_records_stay_bounded_and_oldest_go_first_across_a_failed_report(
    link: WorkerLink,
) -> None:
    front = CacheRecorder()
    report = EdgeReport(link, front, served_enabled=True, max_pending=2)
    served_hit(report, front, "r-1")
    served_hit(report, front, "r-2")
    await report.flush()  # nobody listens: both kept
    served_hit(report, front, "r-3")  # newer than what was given back: r-1 goes
    worker = Worker(socket_of(link))
    await worker.start()
    try:
        await report.flush()
        assert worker.served.get("r-1", "t1") is None
        assert worker.served.get("r-2", "t1") is not None
        assert worker.served.get("r-3", "t1") is not None
        assert report.dropped >= 1
    finally:
        await worker.close()


async def test_a_report_of_another_version_is_refused(link: WorkerLink) -> None:
    worker = Worker(socket_of(link))
    await worker.start()
    try:
        stale = orjson.dumps({"v": 99, "observed": [], "served": []})
        with pytest.raises(WorkerUnavailable, match="HTTP 400"):
            await link.post(REPORT_PATH, stale)
    finally:
        await worker.close()
