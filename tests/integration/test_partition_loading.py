"""Partitions of the semantic index loaded on demand, against a real Redis: two replicas' stores
and streams (A writes, B follows and loads), real FAISS and meaning guards, 8-dimensional
hand-made vectors (no models).

B holds a partition only once asked about it: the ask starts the load and returns at once, the
partition hits once loaded, the stream keeps it current and skips the partitions B does not
hold. Past the memory budget the coldest partition goes, and loads again when asked. A
snapshot brings a partition back without a rebuild (its HNSW graph as it was), caught up from
the stream; a snapshot the stream no longer covers, a damaged one and a missing one fall back
to a rebuild from Redis.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import redis

from core.clock import SystemClock
from core.config import RedisConfig
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.keys.request import PARTITION_TAG_CHARS, CacheRequest, Route
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.signature import Analysis, MeaningSignature
from normalize.prompt_features import NoFeatures, PromptAnalysis, SemanticSkip
from tests.support.entries import make_entry
from tests.support.waiting import wait_until
from tiers.base import Entry, MatchKind
from tiers.partition_loader import PartitionLoader
from tiers.policies.thresholds import ThresholdController
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.replication import (
    EventKind,
    ReplicationEvent,
    StreamCursor,
    StreamReplication,
    stream_key,
)
from tiers.semantic.indexed import entry_bytes
from tiers.semantic.snapshot import SnapshotStore
from tiers.semantic.tier import SemanticTier
from tiers.semantic.vector_index import VectorIndex
from tiers.service import CacheService

pytestmark = pytest.mark.redis

DIM = 8
ANALYSIS = Analysis(("reset", "pin"), MeaningSignature(), words=frozenset({"reset", "pin"}))
P1 = "1" * PARTITION_TAG_CHARS + "a" * 48
P2 = "2" * PARTITION_TAG_CHARS + "b" * 48
P3 = "3" * PARTITION_TAG_CHARS + "c" * 48


def tag(partition: str) -> str:
    return partition[:PARTITION_TAG_CHARS]


def axis(n: int) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[n] = 1.0
    return vector


def near(n: int) -> np.ndarray:
    """At cosine 0.97 from axis `n` (a query along it hits, one along another axis does not)."""
    other = (n + 1) % DIM
    return (0.97 * axis(n) + math.sqrt(1 - 0.97**2) * axis(other)).astype(np.float32)


def entry(partition: str, name: str, n: int) -> Entry:
    """An entry of `partition` (stored now, for an hour) near axis `n`."""
    return make_entry(
        name,
        entry_id=f"{tag(partition)}-{name}",
        partition=partition,
        exact_key=f"{tag(partition)}{name}",
        analysis=ANALYSIS.to_wire(),
        vector=near(n).tobytes(),
        stored_at=time.time(),
        ttl_s=3600.0,
    )


class Replica:
    """One replica's Redis tier, stream follower, semantic tier and partition loader."""

    def __init__(self, url: str, snapshot_dir: Path | None = None, **semantic: object) -> None:
        self.redis_config = RedisConfig(url=url)
        self.config = SemanticConfig(**{"flat_max_entries": 1_000, **semantic})  # type: ignore[arg-type]
        self.connection = RedisConnection(self.redis_config)
        self.store = RedisTier(self.connection, self.redis_config)
        self.semantic = SemanticTier(
            self.config,
            MeaningGuard(self.config),
            ThresholdController(VerifyConfig(), 0.9),
            SystemClock(),
            CacheRecorder(),
        )
        self.semantic.set_dimension(DIM)
        cursor = StreamCursor()
        snapshots = SnapshotStore(str(snapshot_dir), self.config) if snapshot_dir else None
        self.loader = PartitionLoader(
            self.semantic,
            self.store,
            self.connection,
            stream_key(self.redis_config),
            self.config,
            cursor,
            snapshots,
            SystemClock(),
        )
        self.loader.models_loaded()
        self.stream = StreamReplication(
            self.connection,
            self.store,
            self.redis_config,
            [],
            self.semantic,
            partitions=self.loader,
            cursor=cursor,
        )
        self._follower: asyncio.Task[None] | None = None

    async def start(self) -> Replica:
        await self.connection.start()
        await self.stream.bootstrap()
        self._follower = asyncio.get_running_loop().create_task(self.stream.follow())
        return self

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with pytest.raises(asyncio.CancelledError):
                await self._follower
        await self.loader.close()
        await self.semantic.close()
        await self.connection.close()

    async def put(self, item: Entry) -> None:
        """Stored as a replica does: the record in Redis, then the event on the stream."""
        await self.store.put(item)
        await self.stream.publish(ReplicationEvent(EventKind.ADD, item.entry_id))

    async def delete(self, entry_id: str) -> None:
        await self.store.delete(entry_id)
        await self.stream.publish(ReplicationEvent(EventKind.DELETE, entry_id))

    async def hits(self, partition: str, n: int) -> list[str]:
        """The entry names a query along axis `n` finds in `partition`."""
        found = await self.semantic.search(partition, axis(n), ANALYSIS)
        return [c.entry_id.split("-", 1)[1] for c in found]

    async def loaded(self, partition: str) -> None:
        await wait_until(lambda: tag(partition) in self.loader.held(), timeout_s=10)


class Replicas:
    """The replicas of one test, on one Redis, closed at its end."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._made: list[Replica] = []

    async def make(self, snapshot_dir: Path | None = None, **semantic: object) -> Replica:
        replica = Replica(self._url, snapshot_dir, **semantic)
        self._made.append(replica)
        return await replica.start()

    @property
    def last(self) -> Replica:
        return self._made[-1]

    async def close(self) -> None:
        for replica in reversed(self._made):
            await replica.close()


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[Replicas]:
    made = Replicas(redis_url)
    yield made
    await made.close()


async def test_a_partition_loads_when_first_asked_and_hits_once_loaded(
    replicas: Replicas, redis_url: str
) -> None:
    a = await replicas.make()
    for n in range(3):
        await a.put(entry(P1, f"e{n}", n))
        await a.put(entry(P2, f"e{n}", n))  # another partition: not read by P1's load
    b = await replicas.make()
    assert await b.hits(P1, 0) == [] and b.loader.held() == []
    with redis.Redis.from_url(redis_url) as client:
        client.config_resetstat()
    b.loader.want(P1)  # what a lookup does first, exact hit or not
    # The ask returns at once; the load runs in the background, the lookup goes on without it.
    assert b.loader.loading() == [tag(P1)]
    assert await b.hits(P1, 0) == []
    await b.loaded(P1)
    assert b.loader.loading() == []
    assert [await b.hits(P1, n) for n in range(3)] == [["e0"], ["e1"], ["e2"]]
    assert b.loader.loaded_from_redis == 1 and b.semantic.size() == 3
    with redis.Redis.from_url(redis_url) as client:
        commands = client.info("commandstats")
    # Read from the partition's own hash: no SCAN of every partition's keys.
    assert "cmdstat_scan" not in commands and commands["cmdstat_hgetall"]["calls"] == 3
    # From now on the stream keeps it current.
    await a.put(entry(P1, "e3", 3))
    await wait_until(lambda: b.semantic.tag_size(tag(P1)) == 4)
    assert await b.hits(P1, 3) == ["e3"]
    await a.delete(f"{tag(P1)}-e0")
    await wait_until(lambda: b.semantic.tag_size(tag(P1)) == 3)
    assert await b.hits(P1, 0) == []


class Prompt:
    """A prompt's features as the semantic tier reads them: the analysis, a chosen vector."""

    def __init__(self, vector: np.ndarray) -> None:
        self._vector = vector

    async def analysis(self) -> PromptAnalysis | None:
        return PromptAnalysis(ANALYSIS, None, ANALYSIS.to_wire())

    async def vector(self) -> np.ndarray | None:
        return self._vector

    def vector_if_ready(self) -> np.ndarray | None:
        return self._vector

    async def rescore_vector(self) -> np.ndarray | None:
        return None  # one stage

    def semantic_allowed(self) -> bool:
        return True

    def skip_reason(self) -> SemanticSkip | None:
        return None


def request(partition: str, name: str) -> CacheRequest:
    return CacheRequest(
        Route.CHAT, "t", "", "m", partition, f"{tag(partition)}{name}", "q", False, False
    )


async def test_a_lookup_starts_the_load_and_is_answered_without_waiting_for_it(
    replicas: Replicas,
) -> None:
    a = await replicas.make()
    # Enough entries that loading them takes far longer than a lookup.
    for start in range(0, 5_000, 20):
        await asyncio.gather(
            *(a.put(entry(P1, f"e{n}", 2 + n % 6)) for n in range(start, start + 20))
        )
    await a.put(entry(P1, "known", 0))
    # Flat (exact) throughout: the filler's vectors repeat, which no HNSW graph searches well.
    b = await replicas.make(flat_max_entries=10_000)
    service = CacheService(
        [b.store], SystemClock(), CacheRecorder(), semantic=b.semantic, partitions=b.loader
    )
    # An exact hit starts the load too, and is served from Redis meanwhile.
    exact = await service.lookup(request(P1, "known"), NoFeatures())
    assert exact.hit is not None and exact.hit.match is MatchKind.EXACT
    assert b.loader.loading() == [tag(P1)]
    # A paraphrase while the partition loads: answered at once, from what the index holds of
    # the partition so far (its entry may have arrived already, or not: then a miss).
    paraphrase = await service.lookup(request(P1, "paraphrase"), Prompt(axis(0)))
    assert b.loader.loading() == [tag(P1)] and b.semantic.tag_size(tag(P1)) < 5_001
    assert paraphrase.hit is None or paraphrase.hit.match is MatchKind.SEMANTIC
    await b.loaded(P1)
    again = await service.lookup(request(P1, "paraphrase"), Prompt(axis(0)))
    assert again.hit is not None and again.hit.match is MatchKind.SEMANTIC
    assert again.hit.entry.entry_id == f"{tag(P1)}-known"


async def test_stream_events_of_partitions_not_held_are_skipped(replicas: Replicas) -> None:
    a, b = await replicas.make(), await replicas.make()
    b.loader.want(P1)
    await b.loaded(P1)
    await a.put(entry(P2, "other", 1))
    await a.put(entry(P1, "mine", 0))
    await wait_until(lambda: b.semantic.tag_size(tag(P1)) == 1)
    assert b.stream.skipped == 1 and b.semantic.tag_size(tag(P2)) == 0
    assert b.semantic.size() == 1
    # Asked about later, P2 loads what Redis holds of it.
    b.loader.want(P2)
    await b.loaded(P2)
    assert await b.hits(P2, 1) == ["other"]


async def test_the_memory_budget_drops_the_coldest_partition_which_reloads_on_demand(
    replicas: Replicas,
) -> None:
    per_entry = entry_bytes(DIM, SemanticConfig().hnsw_m)
    # Room for five entries: two partitions of three do not fit together.
    b = await replicas.make(max_memory_bytes=5 * per_entry)
    a = await replicas.make()
    for partition in (P1, P2):
        for n in range(3):
            await a.put(entry(partition, f"e{n}", n))
    b.loader.want(P1)
    await b.loaded(P1)
    b.loader.want(P2)
    await b.loaded(P2)
    assert b.loader.held() == [tag(P2)] and b.loader.dropped == 1
    assert b.semantic.tag_size(tag(P1)) == 0 and await b.hits(P1, 0) == []
    # P1 asked about again: it loads again, and P2 is now the coldest.
    b.loader.want(P1)
    await b.loaded(P1)
    assert b.loader.held() == [tag(P1)] and b.loader.dropped == 2
    assert await b.hits(P1, 2) == ["e2"]


async def test_the_partition_asked_about_last_is_never_the_one_dropped(
    replicas: Replicas,
) -> None:
    per_entry = entry_bytes(DIM, SemanticConfig().hnsw_m)
    b = await replicas.make(max_memory_bytes=2 * per_entry)
    a = await replicas.make()
    for n in range(3):
        await a.put(entry(P3, f"e{n}", n))
    b.loader.want(P3)  # alone over the budget: kept, it is the one in use
    await b.loaded(P3)
    assert b.loader.held() == [tag(P3)] and await b.hits(P3, 1) == ["e1"]


# --- snapshots ---------------------------------------------------------------------------------


async def snapshotted(replicas: Replicas, directory: Path, names: int) -> Replica:
    """A replica (HNSW from the first vector) that loaded P1 from Redis and snapshotted it;
    returns the replica that wrote the entries (the snapshotting one is `replicas.last`)."""
    a = await replicas.make()
    for n in range(names):
        await a.put(entry(P1, f"e{n}", n % DIM))
    first = await replicas.make(directory, flat_max_entries=0, snapshot_min_entries=1)
    first.loader.want(P1)
    await first.loaded(P1)
    await wait_until(lambda: not first.semantic._rebuilding)  # its graph, built
    assert await first.loader.save(tag(P1))
    return a


def graph_of(replica: Replica, partition: str) -> VectorIndex:
    index = replica.semantic._held.indexes[(partition, "en")]
    assert isinstance(index, VectorIndex)
    return index


async def test_a_restart_serves_a_snapshotted_partition_without_a_rebuild(
    replicas: Replicas, tmp_path: Path
) -> None:
    await snapshotted(replicas, tmp_path, names=4)
    restarted = await replicas.make(tmp_path, flat_max_entries=0)
    restarted.loader.want(P1)
    await restarted.loaded(P1)
    assert (restarted.loader.loaded_from_snapshot, restarted.loader.loaded_from_redis) == (1, 0)
    assert graph_of(restarted, P1).is_hnsw and not restarted.semantic._rebuilding
    assert [await restarted.hits(P1, n) for n in range(4)] == [["e0"], ["e1"], ["e2"], ["e3"]]


async def test_a_stale_snapshot_is_caught_up_from_the_stream(
    replicas: Replicas, tmp_path: Path
) -> None:
    a = await snapshotted(replicas, tmp_path, names=3)
    # Written while no replica holding the snapshot ran: only the stream has them.
    await a.put(entry(P1, "later", 5))
    await a.delete(f"{tag(P1)}-e1")
    changed = replace(entry(P1, "e2", 2), threshold=0.99)
    await a.store.replace(changed)
    await a.stream.publish(ReplicationEvent(EventKind.UPDATE, changed.entry_id))
    restarted = await replicas.make(tmp_path, flat_max_entries=0)
    restarted.loader.want(P1)
    await restarted.loaded(P1)
    assert restarted.loader.loaded_from_snapshot == 1
    assert await restarted.hits(P1, 5) == ["later"]
    assert await restarted.hits(P1, 1) == []
    assert await restarted.hits(P1, 0) == ["e0"]
    assert await restarted.hits(P1, 2) == []  # 0.97 is under its new threshold of 0.99


async def test_a_snapshot_the_stream_no_longer_covers_is_rebuilt_from_redis(
    replicas: Replicas, tmp_path: Path, redis_url: str
) -> None:
    a = await snapshotted(replicas, tmp_path, names=2)
    await a.put(entry(P1, "later", 5))
    with redis.Redis.from_url(redis_url) as client:
        client.xtrim(stream_key(a.redis_config), maxlen=0)  # the events after it: trimmed
    restarted = await replicas.make(tmp_path, flat_max_entries=0)
    restarted.loader.want(P1)
    await restarted.loaded(P1)
    assert (restarted.loader.loaded_from_snapshot, restarted.loader.loaded_from_redis) == (0, 1)
    assert await restarted.hits(P1, 5) == ["later"] and await restarted.hits(P1, 1) == ["e1"]


async def test_an_unchanged_partition_only_moves_its_snapshot_on_in_the_stream(
    replicas: Replicas, tmp_path: Path, redis_url: str
) -> None:
    a = await snapshotted(replicas, tmp_path, names=3)
    first = replicas.last
    await a.put(entry(P2, "elsewhere", 1))  # the stream moves on; P1 does not change
    await wait_until(lambda: first.stream.skipped == 1)
    assert await first.loader.save(tag(P1))
    assert first.loader.snapshots_written == 1  # not written again: its stream id moved on
    assert not await first.loader.save(tag(P1))  # nothing new since
    # The events before that point trimmed: only the moved-on id is still covered.
    assert first.stream.cursor.applied is not None
    with redis.Redis.from_url(redis_url) as client:
        client.xtrim(stream_key(a.redis_config), minid=first.stream.cursor.applied)
    restarted = await replicas.make(tmp_path, flat_max_entries=0)
    restarted.loader.want(P1)
    await restarted.loaded(P1)
    assert (restarted.loader.loaded_from_snapshot, restarted.loader.loaded_from_redis) == (1, 0)
    assert [await restarted.hits(P1, n) for n in range(3)] == [["e0"], ["e1"], ["e2"]]


async def test_a_restart_resumes_the_snapshotted_partitions_before_any_lookup(
    replicas: Replicas, tmp_path: Path
) -> None:
    await snapshotted(replicas, tmp_path, names=3)
    size = (tmp_path / f"{tag(P1)}.npz").stat().st_size
    # A budget smaller than the snapshot: nothing is resumed (it would not fit).
    small = await replicas.make(tmp_path, flat_max_entries=0, max_memory_bytes=size - 1)
    assert small.loader.resume() == [] and small.loader.loading() == []
    restarted = await replicas.make(tmp_path, flat_max_entries=0)
    assert restarted.loader.resume() == [tag(P1)]
    await restarted.loaded(P1)  # nobody asked: it was held when the replica stopped
    assert restarted.loader.loaded_from_snapshot == 1
    assert [await restarted.hits(P1, n) for n in range(3)] == [["e0"], ["e1"], ["e2"]]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing"])
async def test_a_damaged_or_missing_snapshot_falls_back_to_a_rebuild(
    replicas: Replicas, tmp_path: Path, damage: str
) -> None:
    await snapshotted(replicas, tmp_path, names=3)
    path = tmp_path / f"{tag(P1)}.npz"
    if damage == "garbage":
        path.write_bytes(b"not a snapshot")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.unlink()
    restarted = await replicas.make(tmp_path, flat_max_entries=0)
    restarted.loader.want(P1)
    await restarted.loaded(P1)
    assert (restarted.loader.loaded_from_snapshot, restarted.loader.loaded_from_redis) == (0, 1)
    assert [await restarted.hits(P1, n) for n in range(3)] == [["e0"], ["e1"], ["e2"]]
    assert not path.exists()  # a damaged one is deleted


async def test_a_snapshot_of_another_embedding_model_is_rebuilt_from_redis(
    replicas: Replicas, tmp_path: Path
) -> None:
    # MiniLM and e5-small both give 384-wide vectors: the width alone cannot tell them apart.
    await snapshotted(replicas, tmp_path, names=3)
    restarted = await replicas.make(tmp_path, flat_max_entries=0, model="e5-small")
    restarted.loader.want(P1)
    await restarted.loaded(P1)
    assert (restarted.loader.loaded_from_snapshot, restarted.loader.loaded_from_redis) == (0, 1)
    assert not (tmp_path / f"{tag(P1)}.npz").exists()  # another model's: deleted


async def test_two_stage_vectors_come_back_with_the_snapshot(
    replicas: Replicas, tmp_path: Path
) -> None:
    a = await replicas.make()
    for n in range(3):
        await a.put(replace(entry(P1, f"e{n}", n), rescore_vector=axis(n + 3).tobytes()))
    settings = {"flat_max_entries": 0, "rescore_model": "mpnet"}
    first = await replicas.make(tmp_path, snapshot_min_entries=1, **settings)
    first.semantic.set_rescore_dimension(DIM)
    first.loader.want(P1)
    await first.loaded(P1)
    assert await first.loader.save(tag(P1))
    restarted = await replicas.make(tmp_path, **settings)
    restarted.semantic.set_rescore_dimension(DIM)
    restarted.loader.want(P1)
    await restarted.loaded(P1)
    assert restarted.loader.loaded_from_snapshot == 1
    held = restarted.semantic._held
    for n in range(3):
        rescore = held.rescore(held.entries[f"{tag(P1)}-e{n}"])
        assert rescore is not None and np.array_equal(rescore, axis(n + 3))


def as_format_2(path: Path) -> None:
    """Rewrite a snapshot as format 2 wrote it: the same arrays, but the answer and rescore
    vectors float32."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    head = json.loads(bytes(arrays["head"]))
    head["version"] = 2
    arrays["head"] = np.frombuffer(json.dumps(head).encode(), dtype=np.uint8)
    for name in [n for n in arrays if n.endswith(("_answers", "_rescores"))]:
        assert arrays[name].dtype == np.float16, "format 3 holds them as float16"
        arrays[name] = arrays[name].astype(np.float32)
    np.savez(path, **arrays)  # type: ignore[arg-type]


async def test_a_format_2_snapshot_is_still_read_with_its_answer_vectors(
    replicas: Replicas, tmp_path: Path
) -> None:
    a = await replicas.make()
    answers = {n: (0.6 * axis(n + 4) + 0.8 * axis(n + 5)).astype(np.float32) for n in range(3)}
    for n in range(3):
        await a.put(replace(entry(P1, f"e{n}", n), answer_vector=answers[n].tobytes()))
    first = await replicas.make(tmp_path, flat_max_entries=0, snapshot_min_entries=1)
    first.loader.want(P1)
    await first.loaded(P1)
    assert await first.loader.save(tag(P1))
    as_format_2(tmp_path / f"{tag(P1)}.npz")
    restarted = await replicas.make(tmp_path, flat_max_entries=0)
    restarted.loader.want(P1)
    await restarted.loaded(P1)
    assert (restarted.loader.loaded_from_snapshot, restarted.loader.loaded_from_redis) == (1, 0)
    for n in range(3):
        held = restarted.semantic.answer_vector(f"{tag(P1)}-e{n}")
        # 0.6 and 0.8 are not float16 values: read back within float16's rounding.
        assert held is not None and np.allclose(held, answers[n], rtol=2.0**-11, atol=0)
    assert [await restarted.hits(P1, n) for n in range(3)] == [["e0"], ["e1"], ["e2"]]
