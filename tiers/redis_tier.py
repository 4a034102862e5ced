"""The Redis tier: the source of truth that replicas share.

Key layout (all of a partition's keys share the hash tag {tag}, so they live in one Redis
Cluster slot and multi-key scripts stay legal):

    {prefix}:{tag}:e:{entry_id}   hash: the entry record (see entry_codec)
    {prefix}:{tag}:k:{key}        string: entry id, for an exact or a lemma key
    {prefix}:{tag}:p              hash: the partition's entry ids → their expiry (ms),
                                  "~max", the latest of those, and "~cur", where the next
                                  store's pruning resumes: what a replica loading the
                                  partition's vectors reads, instead of SCANning every key

Every key expires at the entry's hard expiry (TTL + stale grace), set with PXAT from the
entry's own wall-clock times, so replicas agree on it; the partition's hash at the latest of
its entries'. Entries stored before the partition hash existed are in no hash: exact lookups
find them, a partition load does not.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from core.config import RedisConfig
from core.errors import CorruptEntry
from normalize.keys.request import PARTITION_TAG_CHARS
from tiers.base import Entry, Invalidation, TierName
from tiers.entry_codec import ANALYSIS, BODY, META, decode_fields, encode_fields, record_key
from tiers.redis_connection import RedisConnection

# The entry (ARGV[2], expiring at ARGV[1]) in its partition's hash (KEYS[2]), which expires with
# the last of its entries. Without TIME (a script that reads the clock may not write on Redis
# 6.2), the hash keeps its own latest expiry under "~max".
#
# Nothing removes an id from the hash when its entry expires, and a partition that keeps being
# stored to never expires as a whole: unpruned, a busy partition's hash would keep every id it
# ever had. So each write also visits a few more of its fields (HSCAN from the cursor kept
# under "~cur") and drops the ids that expired before ARGV[3], the written entry's own store
# time (its writer's clock, as the expiries are). Every id is visited once per pass, and a
# pass takes about (size / 10) writes, so the expired ids a hash keeps stay about a tenth of
# the ids stored in one pass. HSCAN is nondeterministic: Redis 6.2 then lets a script write
# only if it replicates its effects, not itself (what Redis 7 always does).
_IN_PARTITION = """
if redis.replicate_commands then redis.replicate_commands() end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
if tonumber(redis.call('HGET', KEYS[2], '~max') or '0') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[2], '~max', ARGV[1])
  redis.call('PEXPIREAT', KEYS[2], ARGV[1])
end
local visited = redis.call('HSCAN', KEYS[2], redis.call('HGET', KEYS[2], '~cur') or '0',
  'COUNT', 10)
local fields = visited[2]
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 1) ~= '~' and tonumber(fields[i + 1]) < tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[2], fields[i])
  end
end
-- (An entry stored past its expiry took the hash with it: no cursor to keep then.)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HSET', KEYS[2], '~cur', visited[1]) end
"""

# Store an entry with its index keys, atomically; returns the id the exact key named until now
# (the entry this one supersedes), swapped with SET … GET (Redis 6.2+). A script rather than a
# MULTI pipeline: all its keys share the partition's hash tag, so it runs on one Cluster node,
# and redis-py's asyncio cluster client runs each command queued in a transaction on a thread
# of its own with a second event loop (blocking the proxy's loop, and deadlocking it when a
# failover makes both loops reinitialize the cluster map).
#   KEYS: entry, partition, exact key, [lemma key]
#   ARGV: expiry ms, entry id, store time ms, field, value, ...
_PUT = (
    """
redis.call('DEL', KEYS[1])
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
"""
    + _IN_PARTITION
    + """
local previous = redis.call('SET', KEYS[3], ARGV[2], 'PXAT', ARGV[1], 'GET')
for i = 4, #KEYS do redis.call('SET', KEYS[i], ARGV[2], 'PXAT', ARGV[1]) end
return previous
"""
)

# Overwrite an entry only while it still exists, atomically with its index keys, so a
# replace racing a delete can never resurrect half a record.
#   KEYS: entry, partition, exact key, [lemma key]
#   ARGV: expiry ms, entry id, store time ms, field, value, ...
_REPLACE_IF_PRESENT = (
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
"""
    + _IN_PARTITION
    + """
for i = 3, #KEYS do redis.call('SET', KEYS[i], ARGV[2], 'PXAT', ARGV[1]) end
return 1
"""
)

# Delete an entry, its place in its partition's hash, and those of its index keys that still
# point to it.
#   KEYS: entry, partition, exact key, [lemma key]   ARGV: entry id
_DELETE_WITH_KEYS = """
local n = redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[1])
for i = 3, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then redis.call('DEL', KEYS[i]) end
end
return n
"""


# A lookup in one round trip: the entry id an exact or lemma key names, then that entry's
# record fields. The record's key is built here from the id; both carry the partition's hash
# tag, so they live in the same Cluster slot.
#   KEYS: index key   ARGV: key prefix, tag length, field names...
_GET_BY_KEY = """
local id = redis.call('GET', KEYS[1])
if not id then return false end
local entry = ARGV[1] .. ':{' .. string.sub(id, 1, tonumber(ARGV[2])) .. '}:e:' .. id
return redis.call('HMGET', entry, unpack(ARGV, 3))
"""


class RedisTier:
    def __init__(self, connection: RedisConnection, config: RedisConfig) -> None:
        self._conn = connection
        self._config = config
        self._prefix = config.key_prefix
        # Entry bodies written, before and after compression (entry_codec.encode_body): their
        # ratio is the compression ratio of stored entries, a health signal.
        self.body_bytes = 0
        self.stored_body_bytes = 0
        self._scripts: dict[str, Any] = {}  # Lua source → its registered script

    @property
    def name(self) -> TierName:
        return TierName.REDIS

    def _entry_key(self, entry_id: str) -> str:
        return record_key(self._prefix, entry_id)

    def _partition_key(self, entry_id: str) -> str:
        return f"{self._prefix}:{{{entry_id[:PARTITION_TAG_CHARS]}}}:p"

    def _index_key(self, key: str) -> str:
        return f"{self._prefix}:{{{key[:PARTITION_TAG_CHARS]}}}:k:{key}"

    def _script(self, client: Any, source: str) -> Any:
        """`source` registered once (redis-py then runs it by SHA, loading it again if the
        server lost its script cache)."""
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = client.register_script(source)
        return script

    async def get(self, key: str) -> Entry | None:
        index_key = self._index_key(key)
        async with self._conn.guard(index_key) as client:
            values = await self._script(client, _GET_BY_KEY)(
                keys=[index_key],
                args=[self._prefix, PARTITION_TAG_CHARS, META, BODY, ANALYSIS],
            )
        return _decoded(values)

    async def get_by_id(self, entry_id: str) -> Entry | None:
        async with self._conn.guard(self._entry_key(entry_id)) as client:
            return await self._load(client, entry_id)

    async def get_full(self, entry_id: str) -> Entry | None:
        """The entry with its vector (for indexing it), or None."""
        entry_key = self._entry_key(entry_id)
        async with self._conn.guard(entry_key) as client:
            record = await client.hgetall(entry_key)
        if not record:
            return None
        try:
            return decode_fields(record)
        except CorruptEntry:
            return None

    async def _load(self, client: Any, entry_id: str) -> Entry | None:
        # The vector is left out: a hit never needs it, and it is the largest field.
        return _decoded(await client.hmget(self._entry_key(entry_id), [META, BODY, ANALYSIS]))

    async def put(self, entry: Entry) -> str | None:
        argv = self._record_args(entry)
        keys = self._record_keys(entry)
        async with self._conn.guard(keys[0]) as client:
            previous = await self._script(client, _PUT)(keys=keys, args=argv)
        if previous is None:
            return None
        previous_id = previous.decode() if isinstance(previous, bytes) else str(previous)
        return None if previous_id == entry.entry_id else previous_id

    async def replace(self, entry: Entry) -> bool:
        argv = self._record_args(entry)
        keys = self._record_keys(entry)
        async with self._conn.guard(keys[0]) as client:
            script = self._script(client, _REPLACE_IF_PRESENT)
            return bool(await script(keys=keys, args=argv))

    async def delete(self, entry_id: str) -> bool:
        entry_key = self._entry_key(entry_id)
        async with self._conn.guard(entry_key) as client:
            meta = await client.hget(entry_key, META)
            if meta is None:
                return False
            parsed = json.loads(meta)
            index = [parsed.get("exact_key"), parsed.get("lemma_key")]
            keys = [
                entry_key,
                self._partition_key(entry_id),
                *(self._index_key(k) for k in index if k),
            ]
            script = self._script(client, _DELETE_WITH_KEYS)
            return bool(await script(keys=keys, args=[entry_id]))

    async def invalidate(self, selector: Invalidation) -> int:
        doomed: list[str] = []
        async for entry in self.scan_entries(with_vectors=False):
            if selector.matches(entry):
                doomed.append(entry.entry_id)
        deleted = 0
        for entry_id in doomed:
            deleted += await self.delete(entry_id)
        return deleted

    async def matching(self, selector: Invalidation) -> list[Entry]:
        return [e async for e in self.scan_entries(with_vectors=False) if selector.matches(e)]

    async def count(self) -> int:
        n = 0
        async with self._conn.guard() as client:
            async for _ in client.scan_iter(match=f"{self._prefix}:*:e:*", count=1000):
                n += 1
        return n

    async def partition_entries(self, tag: str, now_s: float) -> AsyncIterator[Entry]:
        """The entries (with their vectors) of the partition with this tag that are not past
        their hard expiry at `now_s`, from its hash: a load reads the partition's keys only,
        where a SCAN (`scan_entries`) walks every key of every partition."""
        members = f"{self._prefix}:{{{tag}}}:p"
        now_ms = now_s * 1000
        async with self._conn.guard(members) as client:
            batch: list[str] = []
            # Ids past their expiry: nothing removes them as their entries expire (the hash
            # goes only with its last entry), so a load prunes them, or a busy partition's
            # hash would keep every id it ever had.
            expired: list[bytes] = []
            async for raw_id, expiry in client.hscan_iter(members, count=1000):
                entry_id = raw_id.decode()
                if entry_id.startswith("~"):  # "~max", "~cur"
                    continue
                if float(expiry) <= now_ms:
                    expired.append(raw_id)
                    continue
                batch.append(self._entry_key(entry_id))
                if len(batch) >= 256:
                    for entry in await self._load_many(client, batch, None):
                        yield entry
                    batch = []
            for entry in await self._load_many(client, batch, None):
                yield entry
            for start in range(0, len(expired), 1000):
                await client.hdel(members, *expired[start : start + 1000])

    async def scan_entries(self, *, with_vectors: bool = True) -> AsyncIterator[Entry]:
        """Every stored entry, for invalidation and listing (admin-speed, not hot)."""
        fields = None if with_vectors else [META, BODY, ANALYSIS]
        async with self._conn.guard() as client:
            batch: list[bytes] = []
            async for key in client.scan_iter(match=f"{self._prefix}:*:e:*", count=1000):
                batch.append(key)
                if len(batch) >= 256:
                    for entry in await self._load_many(client, batch, fields):
                        yield entry
                    batch = []
            for entry in await self._load_many(client, batch, fields):
                yield entry

    async def _load_many(
        self, client: Any, keys: Sequence[bytes | str], fields: list[str] | None
    ) -> list[Entry]:
        if not keys:
            return []
        pipe = client.pipeline(transaction=False)
        for key in keys:
            if fields is None:
                pipe.hgetall(key)
            else:
                pipe.hmget(key, fields)
        entries = []
        for raw in await pipe.execute():
            record = raw if fields is None else dict(zip(fields, raw, strict=True))
            if not record or (record.get(META) is None and record.get(META.encode()) is None):
                continue  # expired between SCAN and read
            try:
                entries.append(decode_fields(record))
            except CorruptEntry:
                continue
        return entries

    def _record_args(self, entry: Entry) -> list[Any]:
        """ARGV of the scripts that write a record: expiry ms, entry id, store time ms (what
        the partition's pruning counts as now), field, value, ..."""
        argv: list[Any] = [
            int(entry.hard_expires_at * 1000),
            entry.entry_id,
            int(entry.stored_at * 1000),
        ]
        fields = encode_fields(entry, self._config.compress_min_bytes)
        self.body_bytes += len(entry.body)
        self.stored_body_bytes += len(fields[BODY])
        for name, value in fields.items():
            argv += [name, value]
        return argv

    def _record_keys(self, entry: Entry) -> list[str]:
        """KEYS of the scripts that write a record: entry, partition, exact key, [lemma key]."""
        return [
            self._entry_key(entry.entry_id),
            self._partition_key(entry.entry_id),
            *map(self._index_key, self._keys_of(entry)),
        ]

    @staticmethod
    def _keys_of(entry: Entry) -> list[str]:
        return [entry.exact_key] + ([entry.lemma_key] if entry.lemma_key else [])


def _decoded(values: list[bytes | None] | None) -> Entry | None:
    """An entry from its (meta, body, analysis) fields; None when absent or not ours."""
    if not values or values[0] is None:
        return None
    try:
        return decode_fields(dict(zip((META, BODY, ANALYSIS), values, strict=True)))
    except CorruptEntry:
        return None  # another format version or a damaged record: not ours to serve
