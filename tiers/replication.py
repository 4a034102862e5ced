"""Keeping replicas' local tiers in step through a Redis Stream of events.

Redis holds the truth; each replica keeps its own LRU-K and FAISS copies. Whatever changes an
entry (store, feedback, delete, invalidation) is appended to `{prefix}:events`, and every
replica follows the stream and applies the other replicas' events to its local tiers:

    add         load the entry (with its vector) from Redis, index it for semantic search
    update      reload it: a new TTL or threshold (the LRU-K copy is replaced, if held)
    delete      drop it from LRU-K and the semantic index
    invalidate  drop every local entry the selector matches

A replica that starts notes the stream's last id, rebuilds its semantic index from the entries
in Redis, then follows the stream from that id, so nothing written during the rebuild is lost.
Reads block for less than the socket timeout, so a read never looks like an outage.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from core.config import RedisConfig
from core.errors import CorruptEntry, TierUnavailable
from tiers.base import CacheTier, Entry, Invalidation
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.semantic.protocol import SemanticIndex

_log = logging.getLogger("deja.replication")


class EventKind(StrEnum):
    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"
    INVALIDATE = "invalidate"


@dataclass(frozen=True, slots=True)
class ReplicationEvent:
    kind: EventKind
    entry_id: str = ""
    selector: Invalidation | None = None

    def fields(self, replica: str) -> dict[str, str]:
        out = {"kind": str(self.kind), "replica": replica, "entry_id": self.entry_id}
        if self.selector is not None:
            for name in ("tenant", "namespace", "model"):
                value = getattr(self.selector, name)
                if value is not None:
                    out[name] = value
        return out

    @classmethod
    def parse(cls, raw: dict[bytes, bytes]) -> tuple[str, ReplicationEvent]:
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        kind = EventKind(fields["kind"])
        selector = None
        if kind is EventKind.INVALIDATE:
            selector = Invalidation(
                fields.get("tenant"), fields.get("namespace"), fields.get("model")
            )
        return fields.get("replica", ""), cls(kind, fields.get("entry_id", ""), selector)


class Replication(Protocol):
    async def publish(self, event: ReplicationEvent) -> None: ...


class NoReplication:
    """A single replica (no Redis): nobody to tell."""

    async def publish(self, event: ReplicationEvent) -> None:
        return None


class StreamReplication:
    def __init__(
        self,
        connection: RedisConnection,
        redis: RedisTier,
        config: RedisConfig,
        local_tiers: list[CacheTier],
        semantic: SemanticIndex,
        indexes: bool = True,
    ) -> None:
        self._conn = connection
        self._redis = redis
        self._key = f"{config.key_prefix}:events"
        self._maxlen = config.stream_maxlen
        self._block_ms = max(10, int(config.socket_timeout_s * 1000 / 2))
        self._retry_s = config.probe_interval_s
        self._local = local_tiers
        self._semantic = semantic
        # False where no semantic index is kept (edge mode's front): nothing is rebuilt, a new
        # entry elsewhere needs nothing here (it is found in Redis when asked for), and a changed
        # one only drops the local copy instead of loading the entry (vectors and all).
        self._indexes = indexes
        self.replica = os.urandom(8).hex()
        self._last_id: str | None = None
        self.applied = 0
        self.rebuilt = 0

    async def publish(self, event: ReplicationEvent) -> None:
        async with self._conn.guard(self._key) as client:
            await client.xadd(
                self._key, event.fields(self.replica), maxlen=self._maxlen, approximate=True
            )

    async def bootstrap(self) -> None:
        """Note where the stream is, then index every entry Redis holds."""
        async with self._conn.guard(self._key) as client:
            last = await client.xrevrange(self._key, count=1)
        self._last_id = last[0][0].decode() if last else "0-0"
        if not self._indexes:
            return
        count = 0
        async for entry in self._redis.scan_entries(with_vectors=True):
            try:
                await self._semantic.add(entry)
            except CorruptEntry as exc:
                _log.warning("skipping entry %s while rebuilding: %s", entry.entry_id, exc)
                continue
            count += 1
        self.rebuilt = count
        _log.info("semantic index rebuilt from redis: %d entries", count)

    async def follow(self) -> None:
        """Apply other replicas' events until cancelled; waits out Redis outages."""
        while True:
            # redis-py's connect (asyncio.wait_for on Python 3.11) can swallow a cancellation
            # that lands while it connects; without this check the loop would never end.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
            try:
                if self._last_id is None:
                    await self.bootstrap()
                await self._read_once()
            except TierUnavailable:
                await asyncio.sleep(self._retry_s)

    async def _read_once(self) -> None:
        async with self._conn.guard(self._key) as client:
            batches = await client.xread(
                {self._key: self._last_id}, count=256, block=self._block_ms
            )
        for _stream, messages in batches or []:
            for message_id, raw in messages:
                self._last_id = message_id.decode()
                replica, event = ReplicationEvent.parse(raw)
                if replica != self.replica:
                    await self._apply(event)

    async def _apply(self, event: ReplicationEvent) -> None:
        self.applied += 1
        if event.kind is EventKind.INVALIDATE:
            assert event.selector is not None
            for tier in self._local:
                await tier.invalidate(event.selector)
            await self._semantic.invalidate(event.selector)
        elif event.kind is EventKind.DELETE:
            for tier in self._local:
                await tier.delete(event.entry_id)
            await self._semantic.remove(event.entry_id)
        elif not self._indexes:
            if event.kind is EventKind.UPDATE:
                for tier in self._local:
                    await tier.delete(event.entry_id)
        else:
            entry = await self._redis.get_full(event.entry_id)
            if entry is None:
                return  # gone again already
            await self._refresh(entry, event.kind)

    async def _refresh(self, entry: Entry, kind: EventKind) -> None:
        if kind is EventKind.UPDATE:
            for tier in self._local:
                await tier.replace(entry)
        try:
            await self._semantic.add(entry)
        except CorruptEntry as exc:
            _log.warning("not indexing entry %s from another replica: %s", entry.entry_id, exc)
