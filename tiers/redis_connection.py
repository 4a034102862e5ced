"""One Redis (or Redis Cluster) client, its health, and the translation of redis-py errors.

Every Redis call in Deja goes through `RedisConnection.guard()`, the single place where
redis-py's exceptions become `TierUnavailable`. A connection failure marks Redis down: one
warning is logged for the outage, later calls fail at once (no request waits for a connect
timeout while Redis is known to be down), and a probe task pings until Redis answers again,
then logs the recovery and tells the listeners (the replication follower resynchronizes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.config import RedisConfig
from core.errors import TierUnavailable

_log = logging.getLogger("deja.redis")

RecoveryListener = Callable[[], Awaitable[None]]


class RedisConnection:
    def __init__(self, config: RedisConfig) -> None:
        assert config.url, "RedisConnection needs a URL; with none the Redis tier is off"
        self._config = config
        self._client: Any = None
        self._down = False
        self._probe: asyncio.Task[None] | None = None
        self._listeners: list[RecoveryListener] = []
        self.outages = 0

    @property
    def available(self) -> bool:
        return not self._down

    @property
    def client(self) -> Any:
        assert self._client is not None, "RedisConnection.start() was not awaited"
        return self._client

    def on_recovery(self, listener: RecoveryListener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        cfg = self._config
        options: dict[str, Any] = {
            "socket_timeout": cfg.socket_timeout_s,
            "socket_connect_timeout": cfg.connect_timeout_s,
            # One transparent reconnect for a pooled connection that a Redis restart broke.
            "retry": Retry(ExponentialBackoff(cap=0.05, base=0.01), retries=1),
            "retry_on_error": [RedisConnectionError],
        }
        if cfg.cluster:
            self._client = RedisCluster.from_url(cfg.url, **options)
        else:
            self._client = aioredis.Redis.from_url(cfg.url, **options)
        with contextlib.suppress(TierUnavailable):
            async with self.guard() as client:
                await client.ping()
                _log.info("redis connected at %s", _redact(cfg.url))

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        if self._client is not None:
            await self._client.aclose()

    @contextlib.asynccontextmanager
    async def guard(self) -> AsyncIterator[Any]:
        """Yields the client; turns redis-py failures into TierUnavailable."""
        if self._down:
            raise TierUnavailable("redis is unreachable (waiting for it to come back)")
        try:
            yield self.client
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            self._mark_down(exc)
            raise TierUnavailable(f"redis is unreachable: {exc}") from exc
        except RedisError as exc:
            # The server answered but refused the command (wrong type, OOM, cluster moved):
            # the tier cannot serve this call, but Redis itself is up.
            raise TierUnavailable(f"redis refused a command: {exc}") from exc

    def _mark_down(self, exc: BaseException) -> None:
        if self._down:
            return
        self._down = True
        self.outages += 1
        _log.warning(
            "redis at %s is unreachable (%s); serving from the local tiers until it returns",
            _redact(self._config.url),
            exc,
        )
        self._probe = asyncio.get_running_loop().create_task(self._probe_until_up())

    async def _probe_until_up(self) -> None:
        while True:
            await asyncio.sleep(self._config.probe_interval_s)
            try:
                await self.client.ping()
            except (RedisError, OSError):
                continue
            break
        self._down = False
        _log.warning("redis at %s is reachable again", _redact(self._config.url))
        for listener in self._listeners:
            try:
                await listener()
            except TierUnavailable as exc:
                # Redis went away again while resynchronizing; the next probe retries.
                _log.warning("resynchronizing after redis recovered failed: %s", exc)


def _redact(url: str) -> str:
    """The URL without its password, for logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
