"""Redis's side of bench.scale: store throughput through the real store path, and the bytes an
entry's records take in Redis.

Entries are stored by `CacheService.store` (the semantic index, then Redis: the entry's hash,
its exact-key index key, its partition's hash of ids) with their answer vectors attached, as the
proxy stores them once the answer is embedded, 50 at a time as concurrent requests would; no
replication stream (one replica). Bytes are `MEMORY USAGE ... SAMPLES 0`
of a sample of entries' hash and index key, plus each partition hash's usage (entry id →
expiry) divided by its entries, with a 14-byte answer body: the answer's own size is on top,
as it comes (compressed past `redis.compress_min_bytes`). INFO's used_memory before and after,
per entry, is the cross-check.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import redis

from bench.scale_tier import Layout, entry, new_tier
from core.clock import SystemClock
from core.config import RedisConfig
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.service import CacheService

SAMPLE = 200


async def store_throughput(url: str, layout: Layout, vectors: np.ndarray) -> dict[str, Any]:
    config = RedisConfig(url=url)
    connection = RedisConnection(config)
    await connection.start()
    tier = new_tier(SemanticConfig(max_entries=10_000_000))
    service = CacheService([RedisTier(connection, config)], SystemClock(), CacheRecorder(), tier)
    with redis.Redis.from_url(url) as client:
        client.flushall()
        before = int(client.info("memory")["used_memory"])
    try:
        began = time.perf_counter()
        for start in range(0, layout.entries, 50):
            batch = range(start, min(start + 50, layout.entries))
            await asyncio.gather(
                *(service.store(entry(layout, n, vectors[n], vectors[n])) for n in batch)
            )
        took = time.perf_counter() - began
    finally:
        await tier.close()
        await connection.close()
    return {"entries": layout.entries, "seconds": took, "per_s": layout.entries / took} | (
        redis_bytes(url, layout, config.key_prefix, before)
    )


def redis_bytes(url: str, layout: Layout, prefix: str, before: int) -> dict[str, Any]:
    rng = np.random.default_rng(3)
    sample = rng.choice(layout.entries, min(SAMPLE, layout.entries), replace=False)
    with redis.Redis.from_url(url) as client:
        used = int(client.info("memory")["used_memory"]) - before
        record, index = [], []
        for n in sample.tolist():
            tag = layout.tag(int(n))
            record.append(client.memory_usage(f"{prefix}:{{{tag}}}:e:{tag}-e{n}", samples=0))
            index.append(client.memory_usage(f"{prefix}:{{{tag}}}:k:{tag}e{n}", samples=0))
        sets = [
            client.memory_usage(f"{prefix}:{{{layout.tag(p)}}}:p", samples=0) or 0
            for p in range(min(layout.partitions, 50))
        ]
        members = [
            max(1, int(client.hlen(f"{prefix}:{{{layout.tag(p)}}}:p")) - 1)
            for p in range(min(layout.partitions, 50))
        ]
    per_set = float(np.mean([s / m for s, m in zip(sets, members, strict=True)]))
    per_entry = float(np.mean(record)) + float(np.mean(index)) + per_set
    return {
        "record_bytes": float(np.mean(record)),
        "exact_index_bytes": float(np.mean(index)),
        "partition_hash_bytes_per_entry": per_set,
        "bytes_per_entry": per_entry,
        "used_memory_per_entry": used / layout.entries,
    }
