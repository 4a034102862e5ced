"""Keeping replicas' local tiers in step through a Redis Stream of events.

Redis holds the truth; each replica keeps its own LRU-K and FAISS copies. Whatever changes an
entry (store, feedback, delete, invalidation) is appended to `{prefix}:events`, and every
replica follows the stream and applies the other replicas' events to its local tiers:

    add         load the entry (with its vector) from Redis, index it for semantic search
    update      reload it: a new TTL or threshold (the LRU-K copy is replaced, if held)
    delete      drop it from LRU-K and the semantic index
    invalidate  drop every local entry the selector matches

A replica that starts notes the stream's last id and follows the stream from there. Its semantic
index holds a partition only once asked about it (tiers/partition_loader.py loads it then, from
a snapshot or from Redis): `add` and `update` events of partitions it does not hold are skipped
without reading the entry (those entries are in Redis, where a load finds them), while deletes
and invalidations always reach the local key-value copies. Reads block for less than the socket
timeout, so a read never looks like an outage.
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
from normalize.keys.request import PARTITION_TAG_CHARS
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


class HeldPartitions(Protocol):
    """Which partitions the semantic index holds (tiers/partition_loader.py)."""

    def holds(self, tag: str) -> bool:
        """Held or loading: its events are applied."""
        ...

    def removed(self, entry_id: str) -> None:
        """An entry was deleted: a load in progress must not index it again."""
        ...


class EveryPartition:
    """A semantic index that holds every partition (or none at all: edge mode's front)."""

    def holds(self, tag: str) -> bool:
        return True

    def removed(self, entry_id: str) -> None:
        return None


@dataclass(slots=True)
class StreamCursor:
    """The id of the last stream event applied (None until the stream's end was noted): a
    snapshot is current to it. Shared by the follower, which moves it, and the loader."""

    applied: str | None = None


class Replication(Protocol):
    async def publish(self, event: ReplicationEvent) -> None: ...


class NoReplication:
    """A single replica (no Redis): nobody to tell."""

    async def publish(self, event: ReplicationEvent) -> None:
        return None


def stream_key(config: RedisConfig) -> str:
    """The replication stream's Redis key."""
    return f"{config.key_prefix}:events"


class StreamReplication:
    def __init__(
        self,
        connection: RedisConnection,
        redis: RedisTier,
        config: RedisConfig,
        local_tiers: list[CacheTier],
        semantic: SemanticIndex,
        indexes: bool = True,
        partitions: HeldPartitions | None = None,
        cursor: StreamCursor | None = None,
    ) -> None:
        self._conn = connection
        self._redis = redis
        self._key = stream_key(config)
        self._maxlen = config.stream_maxlen
        self._block_ms = max(10, int(config.socket_timeout_s * 1000 / 2))
        self._retry_s = config.probe_interval_s
        self._local = local_tiers
        self._semantic = semantic
        # False where no semantic index is kept (edge mode's front): nothing is rebuilt, a new
        # entry elsewhere needs nothing here (it is found in Redis when asked for), and a changed
        # one only drops the local copy instead of loading the entry (vectors and all).
        self._indexes = indexes
        self._partitions: HeldPartitions = partitions or EveryPartition()
        self.cursor = cursor or StreamCursor()
        self.replica = os.urandom(8).hex()
        self._last_id: str | None = None
        self.applied = 0
        # `add` and `update` events of partitions the semantic index does not hold.
        self.skipped = 0

    async def publish(self, event: ReplicationEvent) -> None:
        async with self._conn.guard(self._key) as client:
            await client.xadd(
                self._key, event.fields(self.replica), maxlen=self._maxlen, approximate=True
            )

    async def bootstrap(self) -> None:
        """Note where the stream is: what is written from now on is followed."""
        async with self._conn.guard(self._key) as client:
            last = await client.xrevrange(self._key, count=1)
        self._last_id = last[0][0].decode() if last else "0-0"
        self.cursor.applied = self._last_id

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
                self.cursor.applied = self._last_id

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
            self._partitions.removed(event.entry_id)
            await self._semantic.remove(event.entry_id)
        elif not self._indexes:
            if event.kind is EventKind.UPDATE:
                for tier in self._local:
                    await tier.delete(event.entry_id)
        elif not self._partitions.holds(event.entry_id[:PARTITION_TAG_CHARS]):
            # Not held here: nothing to index, and a local copy of a changed entry is dropped
            # (cheaper than reading the entry; the next lookup reads it from Redis).
            self.skipped += 1
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
