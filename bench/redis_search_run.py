"""One layout of bench.redis_search on Redis's own vector index: the entries stored through the
real Redis tier, the index built over those very records, then searches, lookups, memory and a
restart of Redis from its RDB, on a Redis Stack server (tests/support/redis_stack.py).

- load: every entry stored by `RedisTier.put` (its record with the vector and the search tag),
  50 at a time, before the index exists; build: FT.CREATE, then Redis indexing those records in
  the background until FT.INFO's percent_indexed is 1;
- knn p50/p99: FT.SEARCH alone (ids and distances, one round trip), with the partition filter
  and without it; recall@1 of the filtered one against exact search;
- search p50/p99: `RedisSearchIndex.search` (KNN with the candidates' records, then the FAISS
  tier's own judging: thresholds, guards, answer check); lookup p50/p99: `CacheService.lookup`
  over it (an exact-key miss, the search, the hit's record read), as bench.scale measures FAISS;
- memory: Redis's used_memory per entry with the records only, then with the index
  (FT.INFO's vector index size beside it), and this process's RSS growth per entry: what a
  replica holds;
- stores/s with the index in place (each store now also inserts into Redis's graph);
- restart: SAVE, the server killed and started again on its RDB: seconds until it answers
  (the RDB loaded: the module indexes every record again meanwhile) and the index answers a
  sampled entry; and the same records' restart before the index existed, for comparison.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import numpy as np
import redis

from bench.scale_tier import ANALYSIS, DIM, FixedFeatures, Layout, entry, percentiles, request
from bench.scale_tier import rss_bytes as process_rss_bytes
from core.clock import SystemClock
from core.config import RedisConfig
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.meaning.guards import MeaningGuard
from tests.support.redis_server import RedisServer
from tiers.entry_codec import search_tag
from tiers.policies.thresholds import ThresholdController
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.semantic.judge import CandidateJudge
from tiers.semantic.redis_search import RedisSearchIndex, index_name, tag_query
from tiers.service import CacheService

# Entries stored after the index exists, for the store rate with it.
STORES_WITH_INDEX = 2_000


class SearchBench:
    """The real Redis tier and the Redis vector index over one server, for one layout."""

    def __init__(self, server: RedisServer, config: SemanticConfig) -> None:
        self.server = server
        self.config = config
        self.redis = RedisConfig(url=server.url)
        self._connect()

    def _connect(self) -> None:
        """The proxy's pieces over the server, as a replica builds them."""
        config = self.config
        self.connection = RedisConnection(self.redis)
        self.store = RedisTier(self.connection, self.redis)
        thresholds = ThresholdController(VerifyConfig(), config.threshold)
        recorder = CacheRecorder()
        judge = CandidateJudge(config, MeaningGuard(config), thresholds, recorder)
        clock = SystemClock()
        self.index = RedisSearchIndex(
            self.connection, self.redis, config, judge, thresholds, clock, recorder
        )
        self.service = CacheService([self.store], clock, recorder, self.index)
        # No read timeout: a SAVE of a million records takes longer than any default.
        self.client = redis.Redis.from_url(self.server.url, socket_timeout=None)

    async def __aenter__(self) -> SearchBench:
        await self.connection.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.disconnect()

    async def disconnect(self) -> None:
        await self.connection.close()
        self.client.close()

    async def reconnect(self) -> None:
        """New pieces over the (restarted) server (its index, if any, as Redis kept it)."""
        self._connect()
        await self.connection.start()

    async def restart_server(self) -> tuple[float, float]:
        """SAVE, the server killed and started on its RDB, reconnected: the seconds the SAVE
        took, and until the server answered again (its RDB loaded)."""
        began = time.perf_counter()
        self.client.save()
        save_s = time.perf_counter() - began
        await self.disconnect()
        self.server.stop()
        began = time.perf_counter()
        self.server.start()  # returns once the RDB is loaded and PING answers
        loaded_s = time.perf_counter() - began
        await self.reconnect()
        return save_s, loaded_s

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def index_info(self) -> dict[str, Any]:
        name = index_name(self.redis.key_prefix, DIM)
        reply = self.client.execute_command("FT.INFO", name)
        if not isinstance(reply, dict):
            reply = dict(zip(reply[::2], reply[1::2], strict=True))
        return {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}

    async def load(self, layout: Layout, vectors: np.ndarray, first: int = 0) -> float:
        """Entries `first` … layout.entries - 1 stored, 50 at a time; returns the seconds."""
        began = time.perf_counter()
        for start in range(first, layout.entries, 50):
            batch = range(start, min(start + 50, layout.entries))
            await asyncio.gather(
                *(self.store.put(entry(layout, n, vectors[n], vectors[n])) for n in batch)
            )
        return time.perf_counter() - began

    async def until_indexed(self, timeout_s: float) -> float:
        """Seconds until Redis has indexed every record."""
        began = time.perf_counter()
        while await self.index.indexing_done() < 1.0:
            assert time.perf_counter() - began < timeout_s, "the index did not finish in time"
            await asyncio.sleep(0.05)
        return time.perf_counter() - began

    def knn_ids(self, tag: str | None, vector: np.ndarray) -> list[str]:
        """FT.SEARCH alone: the nearest records' ids, best first (`tag` None: no filter)."""
        k, ef = self.config.candidates, self.config.hnsw_ef_search
        query = f"*=>[KNN {k} @v $q EF_RUNTIME {ef} AS d]" if tag is None else tag_query(tag, k, ef)
        reply = self.client.execute_command(
            "FT.SEARCH",
            index_name(self.redis.key_prefix, DIM),
            query,
            "PARAMS",
            2,
            "q",
            vector.tobytes(),
            "SORTBY",
            "d",
            "RETURN",
            1,
            "d",
            "LIMIT",
            0,
            k,
            "DIALECT",
            2,
        )
        if isinstance(reply, dict):
            return [doc[b"id"].decode() for doc in reply[b"results"]]
        return [raw.decode() for raw in reply[1::2]]


def number_in(key: str) -> int:
    return int(key.rsplit("-e", 1)[1])


async def measure(
    bench: SearchBench,
    layout: Layout,
    vectors: np.ndarray,
    queries: np.ndarray,
    nearest: np.ndarray,
) -> dict[str, Any]:
    bench.client.flushall()
    before_redis, before_rss = bench.used_memory(), process_rss_bytes()
    load_s = await bench.load(layout, vectors)
    records = bench.used_memory() - before_redis
    # The same records' restart without the index: what a restart of Redis costs today.
    _, plain_loaded_s = await bench.restart_server()
    await bench.index.start({"en": DIM})
    build_s = await bench.until_indexed(timeout_s=7_200)
    with_index = bench.used_memory() - before_redis
    info = bench.index_info()
    searches = await search_times(bench, layout, vectors, queries, nearest)
    lookups = await lookup_times(bench, layout, queries, nearest)
    replica = process_rss_bytes() - before_rss
    grown = Layout(layout.entries + STORES_WITH_INDEX, layout.partitions)
    extra = await bench.load(grown, vectors, first=layout.entries)
    restart = await restart_time(bench, grown, vectors)
    n = layout.entries
    return {
        "entries": n,
        "partitions": layout.partitions,
        "load_s": load_s,
        "stores_per_s_without_index": n / load_s,
        "stores_per_s_with_index": STORES_WITH_INDEX / extra,
        "build_s": build_s,
        "redis_bytes_per_entry_records": records / n,
        "redis_bytes_per_entry_with_index": with_index / n,
        "index_bytes_per_entry": (with_index - records) / n,
        "vector_index_bytes_per_entry": float(info["vector_index_sz_mb"]) * 2**20 / n,
        "replica_rss_bytes_per_entry": replica / n,
        "indexed_docs": int(info["num_docs"]),
        "index_failures": int(info["hash_indexing_failures"]),
        **searches,
        "lookup": lookups,
        "restart": restart,
        "restart_without_index_s": plain_loaded_s,
    }


async def search_times(
    bench: SearchBench,
    layout: Layout,
    vectors: np.ndarray,
    queries: np.ndarray,
    nearest: np.ndarray,
) -> dict[str, Any]:
    filtered, unfiltered, searches = [], [], []
    right = hits = 0
    for q, vector in enumerate(queries):
        truth = int(nearest[q])
        partition = layout.partition(truth)
        tag = search_tag(partition, ANALYSIS.language)
        t = time.perf_counter()
        ids = bench.knn_ids(tag, vector)
        filtered.append(time.perf_counter() - t)
        t = time.perf_counter()
        bench.knn_ids(None, vector)
        unfiltered.append(time.perf_counter() - t)
        top = number_in(ids[0]) if ids else None
        right += top == truth or (
            top is not None
            and math.isclose(  # a tie, within float32's precision
                float(vectors[top] @ vector), float(vectors[truth] @ vector), abs_tol=1e-6
            )
        )
        t = time.perf_counter()
        hits += bool(await bench.index.search(partition, vector, ANALYSIS))
        searches.append(time.perf_counter() - t)
    return {
        "knn_filtered": percentiles(filtered),
        "knn_unfiltered": percentiles(unfiltered),
        "search": percentiles(searches),
        "hit_share": hits / len(queries),
        "recall_at_1": right / len(queries),
    }


async def lookup_times(
    bench: SearchBench, layout: Layout, queries: np.ndarray, nearest: np.ndarray
) -> dict[str, float]:
    times, hits = [], 0
    for q, vector in enumerate(queries):
        partition = layout.partition(int(nearest[q]))
        t = time.perf_counter()
        outcome = await bench.service.lookup(request(layout, partition, q), FixedFeatures(vector))
        times.append(time.perf_counter() - t)
        hits += outcome.hit is not None
    return percentiles(times) | {"hit_share": hits / len(queries)}


async def restart_time(bench: SearchBench, layout: Layout, vectors: np.ndarray) -> dict[str, float]:
    """A restart from the RDB with the index: seconds until the server answers and until the
    index is whole and finds a sampled entry. The module keeps no index on disk: it indexes
    the records again as the RDB loads, and the server answers nothing (LOADING) meanwhile."""
    save_s, loaded_s = await bench.restart_server()
    began = time.perf_counter()
    await bench.index.start({"en": DIM})  # the definition Redis kept: nothing created
    await bench.until_indexed(timeout_s=7_200)
    probe = layout.partitions * 7 % layout.entries
    tag = search_tag(layout.partition(probe), ANALYSIS.language)
    assert f"-e{probe}" in " ".join(bench.knn_ids(tag, vectors[probe])), "not found after restart"
    ready_s = loaded_s + time.perf_counter() - began
    return {"save_s": save_s, "rdb_loaded_s": loaded_s, "ready_s": ready_s}
