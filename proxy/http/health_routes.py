"""/healthz, /readyz and /metrics.

/healthz: the process is alive and serving HTTP. /readyz: 200 once the models the config enables
are loaded and the exact tiers answer, else 503; partitions of the semantic index loading in the
background do not hold it back (its body lists them; `?partition=<tag or entry id>` adds that
partition's state). The body reports Redis and breaker state, but a Redis or upstream outage
does not fail it, because the proxy still serves through them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from proxy.http.finished_requests import RequestLedger
from proxy.http.frame import RequestFrame
from proxy.http.telemetry import CONTENT_TYPE, Telemetry

# Given a partition's tag (or an entry id) from `?partition=`, the report includes its state.
ReadinessReport = Callable[[str | None], tuple[bool, dict[str, Any]]]


class HealthRoutes:
    def __init__(
        self,
        readiness: ReadinessReport,
        telemetry: Telemetry,
        ledger: RequestLedger,
        metrics_enabled: bool,
    ) -> None:
        self._readiness = readiness
        self._telemetry = telemetry
        self._ledger = ledger
        self._metrics_enabled = metrics_enabled

    def register(self, frame: RequestFrame) -> None:
        frame.route("/healthz", "healthz", self.healthz, methods=["GET"])
        frame.route("/readyz", "readyz", self.readyz, methods=["GET"])
        if self._metrics_enabled:
            frame.route("/metrics", "metrics", self.metrics, methods=["GET"])

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        ready, report = self._readiness(request.query.get("partition"))
        report = {"status": "ready" if ready else "starting", **report}
        return web.Response(
            status=200 if ready else 503,
            body=json.dumps(report).encode(),
            content_type="application/json",
        )

    async def metrics(self, request: web.Request) -> web.Response:
        self._ledger.drain()  # requests finished since the last batch count in this scrape
        # Not content_type=/charset=: aiohttp would drop the format's version parameter.
        return web.Response(
            body=self._telemetry.metrics_text(), headers={"Content-Type": CONTENT_TYPE}
        )
