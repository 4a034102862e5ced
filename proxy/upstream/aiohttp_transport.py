"""The production upstream transport: one pooled aiohttp `ClientSession`.

This module is the one place where aiohttp's client exceptions become Deja's UpstreamError
family: a failure to send (refused, reset, DNS) is `UpstreamUnreachable`, a body that breaks
off is `UpstreamProtocolError`. Timeouts are not translated here: a `TimeoutError` (aiohttp's
connect and socket-read timeouts are `TimeoutError`s too) passes through, and the client,
which owns every timeout, makes it an `UpstreamTimeout`. `TimeoutError` is caught before
`aiohttp.ClientError` everywhere below for that reason: `ServerTimeoutError` is both.
"""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp
from multidict import CIMultiDictProxy

from core.config import UpstreamConfig
from core.errors import UpstreamProtocolError, UpstreamUnreachable
from proxy.upstream.client import RequestBody

# How long a resolved upstream host name is reused before it is looked up again.
_DNS_CACHE_TTL_S = 300


class AiohttpTransport:
    """`UpstreamTransport` over aiohttp: a connection pool of `upstream.max_connections`, the
    connect timeout and the whole-call ceiling (`total_timeout_s`) enforced by aiohttp."""

    def __init__(self, config: UpstreamConfig) -> None:
        self._config = config
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # The session is made here, not in __init__: aiohttp wants it made inside the event
        # loop that will use it, and the composition root builds this before the loop runs.
        cfg = self._config
        connector = aiohttp.TCPConnector(limit=cfg.max_connections, ttl_dns_cache=_DNS_CACHE_TTL_S)
        timeout = aiohttp.ClientTimeout(total=cfg.total_timeout_s, connect=cfg.connect_timeout_s)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=True, raise_for_status=False
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def send(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: RequestBody
    ) -> AiohttpBody:
        assert self._session is not None, "AiohttpTransport.start() was not awaited"
        try:
            response = await self._session.request(
                method, url, headers=list(headers), data=body or None
            )
        except TimeoutError:
            raise  # the client's to translate (see the module docstring)
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamUnreachable(f"cannot connect to the upstream: {exc.os_error}") from exc
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
            raise UpstreamUnreachable(f"the upstream closed the connection: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(f"the upstream request failed: {exc}") from exc
        return AiohttpBody(response)


class AiohttpBody:
    """`TransportResponse` over an aiohttp response whose status line and headers arrived."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: CIMultiDictProxy[str] = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except TimeoutError:
            raise
        except aiohttp.ClientError as exc:
            raise UpstreamProtocolError(f"the upstream response broke off: {exc}") from exc

    async def read_chunk(self) -> bytes:
        try:
            return await self._response.content.readany()
        except TimeoutError:
            raise
        except aiohttp.ClientError as exc:
            raise UpstreamProtocolError(f"the upstream stream broke off: {exc}") from exc

    def close(self) -> None:
        # close() (not release()) drops the connection, which is what stops a model server
        # from generating tokens nobody will read.
        self._response.close()
