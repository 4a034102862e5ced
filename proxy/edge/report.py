"""Edge mode's report: what the front served itself, told to the worker that counts everything.

The front (proxy/edge/front.py) answers exact hits without asking the worker, yet the worker's
`/metrics`, `/admin/v1/stats` and feedback by request id must know of them. The front's own
request ledger (proxy/http/finished_requests.py) writes its access log lines and observes each
request here, off the hits' path; the served records and the hit counters are kept here too. Every
`interval_s`, and before the front relays a request that reads them (an admin call, a scrape),
they go to the worker's internal route in one small JSON document: request durations grouped by
their metric labels, not whole request records (at 4,000 hits a second, whole records cost 17 µs
a hit to build and 1.5 ms a batch to encode, which showed in the hits' p99).

A report the worker cannot take (restarting) is kept for the next one, up to `max_pending`
observations; past that the oldest are dropped and counted (`dropped`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

import orjson
from aiohttp import web

from core.errors import WorkerUnavailable
from core.recorder import CacheRecorder, ServedCounts
from proxy.answering.feedback import ServedRecord, ServedRequests
from proxy.edge.worker_link import WorkerLink
from proxy.http.finished_requests import RequestObserver
from tiers.base import MatchKind

REPORT_PATH = "/internal/v1/edge-report"
_VERSION = 2
_log = logging.getLogger("deja.edge")

_Labels = tuple[str, str, int]  # route, cache outcome, status
_Served = tuple[str, str, str, str | None, float | None]  # request id, entry, tenant, match, sim


class EdgeReport:
    """The front's side: the request observer of its ledger and the served log of its hit
    writer, whose contents go to the worker."""

    def __init__(
        self,
        link: WorkerLink,
        recorder: CacheRecorder,
        served_enabled: bool,
        interval_s: float = 0.2,
        max_pending: int = 100_000,
    ) -> None:
        self._link = link
        self._recorder = recorder
        self._served_enabled = served_enabled
        self._interval_s = interval_s
        self._max_pending = max_pending
        # Deques: past max_pending the oldest go, one at a time, for every new request.
        self._observed: dict[_Labels, deque[float]] = {}
        self._pending = 0
        self._served: deque[_Served] = deque()
        self._lock = asyncio.Lock()
        self.dropped = 0
        # Whether the last report was kept back: logged once per outage, not every interval.
        self._kept_back = False

    def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
        key = (route, cache, status)
        durations = self._observed.get(key)
        if durations is None:
            self._observed[key] = durations = deque()
        durations.append(seconds)
        self._pending += 1
        if self._pending > self._max_pending:
            self._drop_oldest()

    @property
    def enabled(self) -> bool:
        return self._served_enabled

    def remember(self, request_id: str, record: ServedRecord) -> None:
        match = record.match.value if record.match is not None else None
        self._served.append((request_id, record.entry_id, record.tenant, match, record.similarity))
        self._trim_served()

    async def run(self) -> None:
        """Flush every `interval_s` until cancelled."""
        while True:
            await asyncio.sleep(self._interval_s)
            await self.flush()

    async def flush(self) -> None:
        """Hand everything observed so far to the worker (kept for the next flush when the
        worker cannot take it)."""
        async with self._lock:
            counts = self._recorder.take_served()
            if not (self._observed or self._served) and counts.empty:
                return
            observed, served = self._observed, self._served
            self._observed, self._served, self._pending = {}, deque(), 0
            payload = orjson.dumps(
                {
                    "v": _VERSION,
                    "observed": [
                        [*labels, list(durations)] for labels, durations in observed.items()
                    ],
                    "served": list(served),
                    **_encoded(counts),
                }
            )
            try:
                await self._link.post(REPORT_PATH, payload)
            except WorkerUnavailable as exc:
                self._give_back(observed, served, counts)
                if not self._kept_back:
                    _log.warning("edge report not delivered, kept for the next: %s", exc.message)
                self._kept_back = True
                return
            if self._kept_back:
                _log.info("edge report delivered again")
                self._kept_back = False

    def _give_back(
        self,
        observed: dict[_Labels, deque[float]],
        served: deque[_Served],
        counts: ServedCounts,
    ) -> None:
        # What was taken is older than what came in during the failed post: it goes first.
        for labels, durations in self._observed.items():
            observed.setdefault(labels, deque()).extend(durations)
        self._observed = observed
        self._pending = sum(map(len, observed.values()))
        served.extend(self._served)
        self._served = served
        self._trim_served()
        self._recorder.add_served(counts)
        while self._pending > self._max_pending:
            self._drop_oldest()

    def _trim_served(self) -> None:
        while len(self._served) > self._max_pending:
            self._served.popleft()
            self.dropped += 1

    def _drop_oldest(self) -> None:
        labels = max(self._observed, key=lambda k: len(self._observed[k]))
        self._observed[labels].popleft()
        self._pending -= 1
        self.dropped += 1


def _encoded(counts: ServedCounts) -> dict[str, Any]:
    """The front's served counts as the report carries them (JSON has no tuple keys)."""
    return {
        "hits": [[tier, match, n] for (tier, match), n in counts.hits.items()],
        "tier_errors": dict(counts.tier_errors),
        "prompt_tokens_saved": counts.prompt_tokens_saved,
        "completion_tokens_saved": counts.completion_tokens_saved,
        "usd_saved": counts.usd_saved,
    }


def _decoded(report: dict[str, Any]) -> ServedCounts:
    return ServedCounts(
        hits={(tier, match): n for tier, match, n in report["hits"]},
        tier_errors=dict(report["tier_errors"]),
        prompt_tokens_saved=report["prompt_tokens_saved"],
        completion_tokens_saved=report["completion_tokens_saved"],
        usd_saved=report["usd_saved"],
    )


class EdgeReportReceiver:
    """The worker's side: applies a report to its request metrics, counters and served
    records."""

    def __init__(
        self, metrics: RequestObserver, recorder: CacheRecorder, served: ServedRequests
    ) -> None:
        self._metrics = metrics
        self._recorder = recorder
        self._served = served

    async def handle(self, request: web.Request) -> web.Response:
        # Read whole past the app's client_max_size (`server.max_body_bytes`): a report comes
        # from the front alone, over its private socket, and a backlog of them may be large.
        try:
            applied = self.apply(orjson.loads(await request.content.read()))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            _log.error("malformed edge report: %r", exc)
            return web.json_response({"error": "malformed edge report"}, status=400)
        return web.json_response({"applied": applied})

    def apply(self, report: dict[str, Any]) -> int:
        """Apply `report`; returns how many requests it counted."""
        if report.get("v") != _VERSION:
            raise ValueError(f"edge report version {report.get('v')!r}, expected {_VERSION}")
        observe, count = self._metrics.observe_request, 0
        for route, cache, status, durations in report["observed"]:
            for seconds in durations:
                observe(route, cache, status, seconds)
            count += len(durations)
        if self._served.enabled:
            for request_id, entry_id, tenant, match, similarity in report["served"]:
                kind = MatchKind(match) if match is not None else None
                self._served.remember(request_id, ServedRecord(entry_id, tenant, kind, similarity))
        self._recorder.add_served(_decoded(report))
        return count
