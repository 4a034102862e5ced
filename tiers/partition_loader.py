"""Partitions loaded into the semantic index on demand, dropped past the memory budget, and
snapshotted to local disk so that a restart serves them again in seconds.

    want(partition)   a lookup or a store there (exact or not). Not held: it is loading from
                      now on, in the background; the lookup goes on without waiting (exact
                      tiers, then what the index holds of it so far, then the upstream).
    load              from its snapshot when there is one the stream still covers (the FAISS
                      parts as they were, then the stream's events since the snapshot's id,
                      replayed), else from its entries in Redis. Then held: the stream keeps it
                      current (tiers/replication.py skips the events of partitions not held).
    budget            past `semantic.max_memory_bytes` the coldest held partitions are dropped
                      (snapshotted first); asked about again, they load again.
    snapshots         every `semantic.snapshot_interval_s`, and at shutdown, for each held
                      partition of at least `semantic.snapshot_min_entries` entries that changed.

A snapshot the stream no longer covers (events after its id were trimmed), one written before
an invalidation that the replay meets, and a damaged one are not used: the partition is rebuilt
from Redis instead, and a damaged file is deleted.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from core.clock import Clock
from core.errors import CorruptEntry, SnapshotUnreadable, TierUnavailable
from core.semantic_config import SemanticConfig
from normalize.keys.request import PARTITION_TAG_CHARS
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.replication import EventKind, ReplicationEvent, StreamCursor
from tiers.semantic.residency import PartitionResidency
from tiers.semantic.snapshot import Restored, Snapshot, SnapshotStore
from tiers.semantic.tier import SemanticTier

_log = logging.getLogger("deja.partitions")

_REPLAY_BATCH = 1000


class PartitionLoader:
    def __init__(
        self,
        semantic: SemanticTier,
        redis: RedisTier,
        connection: RedisConnection,
        stream_key: str,
        config: SemanticConfig,
        cursor: StreamCursor,
        snapshots: SnapshotStore | None,
        clock: Clock,
    ) -> None:
        self._semantic = semantic
        self._clock = clock
        self._redis = redis
        self._conn = connection
        self._stream_key = stream_key
        self._config = config
        self._cursor = cursor
        self._snapshots = snapshots
        self._residency = PartitionResidency(config.max_memory_bytes)
        # Per partition loading: the entries deleted since its load began.
        self._removed: dict[str, set[str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._saved: dict[str, _Saved] = {}  # what this process last wrote, per tag
        # Set once the embedding models are loaded: a load before then could index nothing
        # (the vectors' dimensions are unknown), so it waits.
        self._models = asyncio.Event()
        self.loaded_from_snapshot = 0
        self.loaded_from_redis = 0
        self.dropped = 0
        self.snapshots_written = 0
        self.snapshot_failures = 0

    def want(self, partition: str) -> None:
        self._start(partition[:PARTITION_TAG_CHARS])

    def _start(self, tag: str) -> None:
        if self._residency.touch(tag):
            self._removed[tag] = set()
            task = asyncio.get_running_loop().create_task(self._load(tag), name=f"deja-load-{tag}")
            self._tasks.add(task)
            task.add_done_callback(lambda done: self._finished(tag, done))

    def models_loaded(self) -> None:
        """The semantic tier knows its dimensions: loads may begin."""
        self._models.set()

    def holds(self, tag: str) -> bool:
        return self._residency.holds(tag)

    def removed(self, entry_id: str) -> None:
        loading = self._removed.get(entry_id[:PARTITION_TAG_CHARS])
        if loading is not None:
            loading.add(entry_id)

    def state(self, tag: str) -> str | None:
        """ "loading", "held", or None (not held)."""
        state = self._residency.state(tag)
        return None if state is None else str(state)

    def loading(self) -> list[str]:
        """The tags of the partitions loading now."""
        return self._residency.loading()

    def held(self) -> list[str]:
        """The tags of the partitions held (loaded), least recently asked about first."""
        return self._residency.held()

    async def _load(self, tag: str) -> None:
        try:
            # The snapshot is read and restored while the models may still load; what needs
            # them (the dimensions, the index itself) waits for them.
            restored = await self._restored(tag)
            await self._models.wait()
            if restored is None or not await self._from_snapshot(tag, *restored):
                await self._from_redis(tag)
        except TierUnavailable as exc:
            # Redis is down: forget the partition; the next lookup there tries again.
            _log.warning("could not load partition %s: %s", tag, exc)
            self._forget(tag)
            return
        self._removed.pop(tag, None)
        self._residency.loaded(tag)
        await self.enforce_budget(keep=tag)

    def resume(self) -> list[str]:
        """At start, before any lookup: load the partitions with the newest snapshots, as many
        as their files' sizes fit `semantic.max_memory_bytes` (a snapshot is smaller than what
        it loads into, so this stays under the budget). They were held when the replica
        stopped; reading them back begins while the models load. Returns their tags."""
        if self._snapshots is None:
            return []
        resumed, budget = [], self._config.max_memory_bytes
        for tag, size in self._snapshots.newest():
            if size > budget:
                break
            budget -= size
            self._start(tag)
            resumed.append(tag)
        return resumed

    def _finished(self, tag: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("loading partition %s failed", tag, exc_info=task.exception())
            self._forget(tag)

    def _forget(self, tag: str) -> None:
        self._removed.pop(tag, None)
        self._residency.forget(tag)
        self._semantic.drop_partition(tag)

    async def _from_redis(self, tag: str) -> None:
        removed = self._removed[tag]
        async for entry in self._redis.partition_entries(tag, self._clock.time()):
            if entry.entry_id in removed:
                continue
            try:
                await self._semantic.add(entry)
            except CorruptEntry as exc:
                _log.warning("skipping entry %s while loading: %s", entry.entry_id, exc)
        self.loaded_from_redis += 1
        _log.info("partition %s loaded from redis: %d entries", tag, self._semantic.tag_size(tag))

    async def _restored(self, tag: str) -> tuple[Snapshot, list[Restored]] | None:
        """The partition's snapshot, read and restored with fresh vector ids (None: none, or
        unusable, and then deleted)."""
        snapshot = await self._read_snapshot(tag)
        if snapshot is None:
            return None
        assert self._snapshots is not None
        restored = []
        for image in snapshot.images:
            first = self._semantic.reserve_ids(image.vectors())
            try:
                restored.append(await asyncio.to_thread(self._snapshots.restore, image, first))
            except (ValueError, IndexError, RuntimeError) as exc:  # inconsistent columns
                _log.warning("unusable snapshot of %s, deleted (rebuilding): %r", tag, exc)
                self._snapshots.discard(tag)
                return None
        return snapshot, restored

    async def _from_snapshot(self, tag: str, snapshot: Snapshot, restored: list[Restored]) -> bool:
        """Whether the partition was installed from its restored snapshot and caught up."""
        if not await self._stream_covers(snapshot.stream_id):
            _log.info("snapshot of %s is older than the stream covers: rebuilding", tag)
            return False
        dims = self._semantic.dims
        if any(dims.get(image.language) != image.dim for image in snapshot.images):
            _log.info("snapshot of %s is another model's: rebuilding", tag)
            return False
        for each in restored:
            await self._semantic.install(each, self._removed[tag])
        if not await self._replay(tag, snapshot.stream_id):
            _log.info("an invalidation followed the snapshot of %s: rebuilding", tag)
            self._semantic.drop_partition(tag)
            return False
        # What it holds now is the snapshot and more (replayed, carried over): written anew.
        self._saved.pop(tag, None)
        self.loaded_from_snapshot += 1
        size = self._semantic.tag_size(tag)
        _log.info("partition %s loaded from its snapshot: %d entries", tag, size)
        return True

    async def _read_snapshot(self, tag: str) -> Snapshot | None:
        if self._snapshots is None:
            return None
        try:
            return await asyncio.to_thread(self._snapshots.read, tag)
        except SnapshotUnreadable as exc:
            _log.warning("unreadable snapshot, deleted (rebuilding from redis): %s", exc)
            self._snapshots.discard(tag)
            return None

    async def _stream_covers(self, stream_id: str) -> bool:
        """Whether every event after `stream_id` is still in the stream (trimming removes the
        oldest first, so none after it was trimmed while the stream's first event is at most
        `stream_id`), and the stream is the one the snapshot followed (not a newer Redis's)."""
        async with self._conn.guard(self._stream_key) as client:
            if not await client.exists(self._stream_key):
                return stream_id == "0-0"
            info: dict[str, Any] = await client.xinfo_stream(self._stream_key)
        since, last = _stream_id(stream_id), _stream_id(info["last-generated-id"])
        if since >= last:
            return since == last
        first = info.get("first-entry")
        if since == (0, 0):  # the stream was empty: covered while nothing was ever trimmed
            return int(info["entries-added"]) == int(info["length"])
        return first is not None and _stream_id(first[0]) <= since

    async def _replay(self, tag: str, since: str) -> bool:
        """Apply the partition's events after `since`; False at an invalidation (which may
        have removed entries of the snapshot: the partition is rebuilt instead)."""
        removed = self._removed[tag]
        while True:
            async with self._conn.guard(self._stream_key) as client:
                batch = await client.xrange(
                    self._stream_key, min=f"({since}", max="+", count=_REPLAY_BATCH
                )
            if not batch:
                return True
            for message_id, raw in batch:
                since = message_id.decode()
                _replica, event = ReplicationEvent.parse(raw)
                if event.kind is EventKind.INVALIDATE:
                    return False
                if event.entry_id[:PARTITION_TAG_CHARS] != tag:
                    continue
                if event.kind is EventKind.DELETE:
                    removed.add(event.entry_id)
                    await self._semantic.remove(event.entry_id)
                    continue
                entry = await self._redis.get_full(event.entry_id)
                if entry is not None and entry.entry_id not in removed:
                    try:
                        await self._semantic.add(entry)
                    except CorruptEntry as exc:
                        _log.warning("skipping entry %s while replaying: %s", entry.entry_id, exc)

    async def enforce_budget(self, keep: str | None = None) -> None:
        """Drop the coldest held partitions (snapshotted first) until the rest fit."""
        per_entry = self._semantic.entry_bytes()
        tags = [*self._residency.held(), *self._residency.loading()]
        sizes = {tag: self._semantic.tag_size(tag) * per_entry for tag in tags}
        for tag in self._residency.victims(sizes, keep):
            await self.save(tag)
            self._residency.forget(tag)
            self._semantic.drop_partition(tag)
            self.dropped += 1
            _log.info("partition %s dropped (memory budget)", tag)

    async def save(self, tag: str) -> bool:
        """Snapshot one held partition, unless it is too small or its snapshot is current; a
        partition unchanged since its snapshot only has the snapshot's stream id moved on."""
        stream_id, version = self._cursor.applied, self._semantic.version(tag)
        if self._snapshots is None or stream_id is None:
            return False
        last = self._saved.get(tag)
        if last is not None and (last.version, last.stream_id) == (version, stream_id):
            return False
        if self._semantic.tag_size(tag) < self._config.snapshot_min_entries:
            return False
        try:
            if last is not None and last.version == version:
                await asyncio.to_thread(self._snapshots.restamp, tag, last.content, stream_id)
                self._saved[tag] = _Saved(version, stream_id, last.content)
                return True
            # The stream id first, then the copy: what changes meanwhile is replayed on load.
            images = await self._semantic.images(tag)
            if images is None:  # dropped or reloaded while copied: the next interval's turn
                return False
            written = await asyncio.to_thread(
                self._snapshots.write, Snapshot(tag, stream_id, images)
            )
        except OSError as exc:
            # A full or read-only disk: serving goes on, a restart then rebuilds from Redis.
            _log.error("could not snapshot partition %s: %s", tag, exc)
            self.snapshot_failures += 1
            return False
        self._saved[tag] = _Saved(version, stream_id, written.content)
        self.snapshots_written += 1
        _log.info(
            "partition %s snapshotted: %d bytes, current to %s", tag, written.size_bytes, stream_id
        )
        return True

    async def save_all(self) -> None:
        for tag in self._residency.held():
            await self.save(tag)

    async def close(self) -> None:
        """Stop the loads in progress, then snapshot what is held."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.save_all()


@dataclass(frozen=True, slots=True)
class _Saved:
    """A snapshot this process wrote: the partition's version and the stream id it was
    current to, and its content id."""

    version: int
    stream_id: str
    content: str


def _stream_id(value: object) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else str(value)
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
