"""The one way upstream calls are made: admission control, then the breaker, then the call.

Every `allow()` of the breaker is paired with exactly one outcome: a failure (connection
error, timeout, 5xx), a success (anything else, 4xx included: the client's doing), or a
release when the call was abandoned (cancelled) before an outcome.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from core.errors import BreakerOpen, UpstreamError
from fallback.breaker import Breaker
from proxy.admission import AdmissionControl
from proxy.upstream import UpstreamClient, UpstreamRequest, UpstreamResponse


class UpstreamGate:
    def __init__(
        self, client: UpstreamClient, breaker: Breaker, admission: AdmissionControl
    ) -> None:
        self._client = client
        self._breaker = breaker
        self._admission = admission

    @property
    def breaker(self) -> Breaker:
        return self._breaker

    def admitted(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold one upstream slot (429 when none comes in time)."""
        return self._admission.slot()

    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send `request` unless the breaker is open; call inside `admitted()`."""
        if not self._breaker.allow():
            raise BreakerOpen(
                "the upstream is failing; the circuit breaker is open",
                retry_after_s=self._breaker.retry_after_s(),
            )
        try:
            response = await self._client.open(request)
        except UpstreamError:
            self._breaker.record_failure()
            raise
        except BaseException:
            self._breaker.release()
            raise
        if response.status >= 500:
            self._breaker.record_failure()
        else:
            self._breaker.record_success(response.ttfb_s)
        return response

    @contextlib.asynccontextmanager
    async def call(self, request: UpstreamRequest) -> AsyncIterator[UpstreamResponse]:
        """`open` inside a slot, releasing the response at the end."""
        async with self.admitted():
            response = await self.open(request)
            try:
                yield response
            finally:
                response.release()
