"""One Redis (or Redis Cluster) client, its health, and the translation of redis-py errors.

Every Redis call in Deja goes through `RedisConnection.guard()`, the single place where
redis-py's exceptions become `TierUnavailable`. A connection failure marks Redis down: one
warning is logged for the outage, later calls fail at once (no request waits for a connect
timeout while Redis is known to be down), and a probe task pings until Redis answers again,
then logs the recovery and tells the listeners (the replication follower resynchronizes).

On a Redis Cluster a call names the key it is about (`guard(key)`), and a connection failure
marks down only the node serving that key's slot, for `probe_interval_s`: the partitions on
the other masters keep working while one master fails over. Once the period is over the next
call tries again; redis-py refreshes its slot map after a failed call, so once a replica has
taken over, the slot's calls go to it. Calls about no key (SCAN over every master) fail
without marking anything down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.config import RedisConfig
from core.errors import TierUnavailable

_log = logging.getLogger("deja.redis")

RecoveryListener = Callable[[], Awaitable[None]]

# redis-py's own source folder: an error raised from inside it is one of its failures.
_REDIS_PY = Path(redis.__file__).resolve().parent


class RedisConnection:
    def __init__(self, config: RedisConfig) -> None:
        assert config.url, "RedisConnection needs a URL; with none the Redis tier is off"
        self._config = config
        self._client: Any = None
        self._down = False
        self._probe: asyncio.Task[None] | None = None
        self._listeners: list[RecoveryListener] = []
        # Cluster nodes (by host:port) a call failed to reach → monotonic time until which
        # calls for their slots fail at once.
        self._nodes_down_until_s: dict[str, float] = {}
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
    async def guard(self, key: str | None = None) -> AsyncIterator[Any]:
        """Yields the client; turns redis-py failures into TierUnavailable. `key`: the key
        the calls are about (on a cluster, an outage is then the node's serving it)."""
        if self._down:
            raise TierUnavailable("redis is unreachable (waiting for it to come back)")
        node = self._node_of(key)
        if node is not None and self._nodes_down_until_s.get(node, 0.0) > time.monotonic():
            raise TierUnavailable(f"redis node {node} is unreachable (failing over?)")
        try:
            yield self.client
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            self._lost(exc)
            raise TierUnavailable(f"redis is unreachable: {exc}") from exc
        except (AttributeError, TypeError) as exc:
            # redis-py can leak a transport's internals when a connection is closed under it
            # (a node failing over; redis/redis-py#4287): a lost connection all the same.
            if not _raised_in_redis_py(exc.__traceback__):
                raise
            self._lost(exc)
            raise TierUnavailable(f"redis connection lost: {exc!r}") from exc
        except (RedisError, RedisClusterException) as exc:
            # The server answered but refused the command (wrong type, OOM, cluster moved),
            # or the cluster client has no node for a slot yet: the tier cannot serve this
            # call, but Redis itself is up.
            raise TierUnavailable(f"redis refused a command: {exc}") from exc
        if node is not None and self._nodes_down_until_s.pop(node, None) is not None:
            _log.warning("redis node %s is reachable again", node)

    def _node_of(self, key: str | None) -> str | None:
        """The cluster node serving `key` as the client knows it; None on a single Redis,
        for no key, or while the client has no slot map yet."""
        if key is None or not self._config.cluster or self._client is None:
            return None
        try:
            node = self._client.get_node_from_key(key)
        except RedisClusterException:
            return None
        return None if node is None else str(node.name)

    def _lost(self, exc: BaseException) -> None:
        if not self._config.cluster:
            self._mark_down(exc)
            return
        # The cluster client names the node a command failed to reach. Not always the one the
        # key's slot mapped to, and an error while it refreshed its slot map (from a dead
        # node, say) names none: then only this call fails.
        node = getattr(exc, "last_failed_node_name", None)
        if node is None:
            return
        now_s = time.monotonic()
        for name, until_s in list(self._nodes_down_until_s.items()):
            if until_s <= now_s and name != node:
                del self._nodes_down_until_s[name]  # replaced by a failover, or back
        if node not in self._nodes_down_until_s:
            self.outages += 1
            _log.warning("redis node %s is unreachable (%s); its slots miss", node, exc)
        self._nodes_down_until_s[node] = now_s + self._config.probe_interval_s

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


def _raised_in_redis_py(trace: TracebackType | None) -> bool:
    while trace is not None:
        if Path(trace.tb_frame.f_code.co_filename).resolve().is_relative_to(_REDIS_PY):
            return True
        trace = trace.tb_next
    return False


def _redact(url: str) -> str:
    """The URL without its password, for logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
