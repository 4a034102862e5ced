"""The one way upstream calls are made: admission control, then the breaker, then the call.

Every `allow()` of the breaker is paired with exactly one outcome, for the call as a whole
whatever its retries: a failure (connection error, timeout, 5xx), a success (anything else,
4xx included: the client's doing; a 429 is the upstream pacing this client, not failing), or a
release when the call was abandoned (cancelled, or refused a slot again after a wait) before an
outcome. The waits between attempts are spent outside the admission slot (`Slot.pause`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from core.errors import BreakerOpen, UpstreamError
from fallback.breaker import Breaker
from proxy.answering.admission import AdmissionControl, Slot
from proxy.upstream.client import UpstreamClient, UpstreamRequest, UpstreamResponse


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

    def admitted(self) -> contextlib.AbstractAsyncContextManager[Slot]:
        """Hold one upstream slot (429 when none comes in time)."""
        return self._admission.slot()

    async def open(self, request: UpstreamRequest, slot: Slot) -> UpstreamResponse:
        """Send `request` unless the breaker is open, holding `slot` (from `admitted()`)
        except while waiting to retry."""
        if not self._breaker.allow():
            raise BreakerOpen(
                "the upstream is failing; the circuit breaker is open",
                retry_after_s=self._breaker.retry_after_s(),
            )
        try:
            response = await self._client.open(request, pause=slot.pause)
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
        async with self.admitted() as slot:
            response = await self.open(request, slot)
            try:
                yield response
            finally:
                response.release()
