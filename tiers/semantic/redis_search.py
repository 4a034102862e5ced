"""The similarity tier on Redis's own vector index (`semantic.backend: redis-search`): a KNN
search inside the Redis that holds the entries, filtered to the query's partition and language,
then the same judging as the FAISS tier's (tiers/semantic/judge.py) on what it returns.

The index covers the very hashes the Redis tier stores (tiers/redis_tier.py): their vector
field `v` as stored (float32) and their search tag `t` ("partition:language",
tiers/entry_codec.py), by key prefix; Redis indexes a record as it is written and forgets it as
it is deleted or expires, so a replica holds no vectors and adds, removes and invalidates
nothing of its own. Redis's search module keeps its own copy of each vector in the graph, on
top of the record's: the memory moves from every replica into Redis, about doubled there
(docs/redis-search.md gives the numbers).

    FT.SEARCH <prefix>:vectors:<dim>
        "(@t:{<partition>:<language>})=>[KNN <candidates> @v $q EF_RUNTIME <efSearch> AS d]"
        RETURN d m a w r    (distance, meta, analysis, answer and rescore vectors: no body)

Needs the search module (Redis Stack, or Redis 8) on a single Redis: Redis Cluster's open
version has no cross-shard search. `require_module` says so, with a clear error, when the
module is missing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from core.clock import Clock
from core.config import RedisConfig
from core.errors import ConfigError, CorruptEntry, TierUnavailable
from core.pacing import Pacer, Unpaced
from core.recorder import CacheRecorder, GuardName
from core.semantic_config import SemanticConfig
from normalize.meaning.signature import Analysis
from tiers.base import Entry, Invalidation, TierName
from tiers.entry_codec import (
    ANALYSIS,
    ANSWER_VECTOR,
    META,
    RESCORE_VECTOR,
    SEARCH_TAG,
    VECTOR,
    decode_without_body,
    record_key,
    search_tag,
)
from tiers.policies.thresholds import ThresholdController
from tiers.redis_connection import RedisConnection
from tiers.semantic.indexed import Indexed
from tiers.semantic.judge import CandidateJudge, Neighbours
from tiers.semantic.protocol import NearestNotes, RescoreVector, SemanticCandidate

_DISTANCE = "d"
_RETURNED = (_DISTANCE, META, ANALYSIS, ANSWER_VECTOR, RESCORE_VECTOR)
# The answer vectors of the latest candidates, kept for the judge and for `answer_vector`: the
# verifier and the learning from misses ask for a candidate's right after its search (once the
# fresh answer is in, seconds later). 4,096 of them: 6 MB with MiniLM, against every vector
# in a FAISS replica.
RECENT_ANSWERS = 4_096


def index_name(prefix: str, dim: int) -> str:
    """One index per vector dimension: another embedding model's vectors go to another."""
    return f"{prefix}:vectors:{dim}"


def index_definition(prefix: str, dim: int, config: SemanticConfig) -> list[Any]:
    """FT.CREATE's arguments: the entry records under `prefix` that have a vector (the
    partition hashes under the same prefix have none), HNSW over `v`, a tag over `t`."""
    return [
        "FT.CREATE",
        index_name(prefix, dim),
        "ON",
        "HASH",
        "PREFIX",
        1,
        f"{prefix}:",
        "FILTER",
        f"exists(@{VECTOR})",
        "SCHEMA",
        SEARCH_TAG,
        "TAG",
        "SEPARATOR",
        "|",  # a tag holds no "|", so one record has one tag
        VECTOR,
        "VECTOR",
        "HNSW",
        12,
        "TYPE",
        "FLOAT32",
        "DIM",
        dim,
        "DISTANCE_METRIC",
        "COSINE",
        "M",
        config.hnsw_m,
        "EF_CONSTRUCTION",
        config.hnsw_ef_construction,
        "EF_RUNTIME",
        config.hnsw_ef_search,
    ]


def tag_query(tag: str, k: int, ef_search: int) -> str:
    """The KNN query within one search tag; the tag's punctuation escaped, as the query syntax
    wants."""
    escaped = "".join(c if c.isalnum() or c == "_" else "\\" + c for c in tag)
    return f"(@{SEARCH_TAG}:{{{escaped}}})=>[KNN {k} @{VECTOR} $q EF_RUNTIME {ef_search} AS d]"


def search_results(reply: Any) -> list[dict[str, bytes]]:
    """FT.SEARCH's documents as field → value, in order, from a RESP2 reply ([total, id,
    [field, value, ...], ...]) or a RESP3 one ({"results": [{"extra_attributes": ...}]})."""
    if isinstance(reply, dict):
        return [
            {_text(k): v for k, v in doc[b"extra_attributes"].items()} for doc in reply[b"results"]
        ]
    docs = []
    for fields in reply[2::2]:
        docs.append({_text(fields[i]): fields[i + 1] for i in range(0, len(fields), 2)})
    return docs


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisSearchIndex:
    """A `SemanticIndex` whose vectors are Redis's (see the module's docstring)."""

    def __init__(
        self,
        connection: RedisConnection,
        redis: RedisConfig,
        config: SemanticConfig,
        judge: CandidateJudge,
        thresholds: ThresholdController,
        clock: Clock,
        recorder: CacheRecorder,
    ) -> None:
        self._conn = connection
        self._recorder = recorder
        self._prefix = redis.key_prefix
        self._config = config
        self._judge = judge
        self._thresholds = thresholds
        self._clock = clock
        # Per language: its vectors' dimension and the index of that dimension (languages whose
        # models share a dimension share an index; the search tag keeps them apart).
        self._dims: dict[str, int] = {}
        self._rescore_dim = 0
        # What `start` was given, until the indexes exist (Redis may be down when it is called).
        self._wanted: dict[str, int] = {}
        self._recent_answers: OrderedDict[str, np.ndarray] = OrderedDict()
        # The same for their second-model vectors (two-stage), which the judge reads.
        self._recent_rescores: OrderedDict[str, np.ndarray] = OrderedDict()

    async def require_module(self) -> None:
        """A Redis without the search module is a configuration error, said before the models
        load (minutes) rather than after."""
        async with self._conn.guard() as client:
            modules = await client.module_list()
        if not any(_text(m.get(b"name", m.get("name", b""))) == "search" for m in modules):
            raise ConfigError(
                "semantic.backend redis-search needs Redis's search module (Redis Stack, or "
                "Redis 8), which the Redis at redis.url lacks; `make redis-stack` installs one"
            )

    async def start(self, dims: Mapping[str, int], rescore_dim: int = 0) -> None:
        """The indexes for each language's vectors, once its model is loaded; created when
        Redis has none yet (Redis then indexes the records it holds already, in the
        background). With Redis unreachable (TierUnavailable), the first search after it is
        back creates them."""
        assert dims and all(dim > 0 for dim in dims.values()), "the models' dimensions"
        self._wanted, self._rescore_dim = dict(dims), rescore_dim
        await self._create()

    async def _create(self) -> None:
        await self.require_module()
        async with self._conn.guard() as client:
            existing = {_text(name) for name in await client.execute_command("FT._LIST")}
            for dim in sorted(set(self._wanted.values())):
                if index_name(self._prefix, dim) not in existing:
                    definition = index_definition(self._prefix, dim, self._config)
                    await client.execute_command(*definition)
        self._dims = dict(self._wanted)

    def index_of(self, language: str) -> str | None:
        """The index of `language`'s vectors (None before its model is loaded)."""
        dim = self._dims.get(language)
        return None if dim is None else index_name(self._prefix, dim)

    async def indexing_done(self, language: str = "en") -> float:
        """The share of the records indexed so far (1.0: done), as FT.INFO says."""
        index = self.index_of(language)
        assert index is not None, f"no index for {language} yet"
        async with self._conn.guard() as client:
            reply = await client.execute_command("FT.INFO", index)
        if not isinstance(reply, dict):  # RESP2: name, value, name, value, ...
            reply = dict(zip(reply[::2], reply[1::2], strict=True))
        return float({_text(k): v for k, v in reply.items()}["percent_indexed"])

    async def search(
        self,
        partition: str,
        vector: np.ndarray,
        query: Analysis,
        threshold_override: float | None = None,
        pacer: Pacer | None = None,
        notes: NearestNotes | None = None,
        rescore: RescoreVector | None = None,
    ) -> list[SemanticCandidate]:
        pacer = pacer or Unpaced()
        await pacer.step()
        relaxed = threshold_override is not None
        try:
            live = await self._neighbours(partition, vector, query.language, relaxed)
        except TierUnavailable:
            # Redis is down: no candidates, as the Redis tier's own lookups find nothing then
            # (counted as its error, tiers/service.py); the request goes upstream.
            self._recorder.tier_error(TierName.REDIS)
            return []
        chosen = await self._judge.choose(
            query, live, self, pacer, threshold_override, notes, rescore
        )
        return [] if chosen is None else [chosen[1]]

    async def contradicts(
        self,
        partition: str,
        vector: np.ndarray,
        query: Analysis,
        entry_id: str,
        pacer: Pacer | None = None,
    ) -> bool:
        """Whether a neighbour contradicts `entry_id` as the answer (the judge's answer check),
        for matches found without a similarity search (the lemma key)."""
        if self._config.answer_margin <= 0:
            return False
        try:
            neighbours = await self._neighbours(partition, vector, query.language)
            found = [(item, s) for item, s in neighbours if item.entry_id == entry_id]
            own = found[0] if found else await self._outside(entry_id, vector, query.language)
        except TierUnavailable:
            self._recorder.tier_error(TierName.REDIS)
            return False  # nothing to check against: as for a search, Redis is down
        if own is None:
            return False
        item, similarity = own
        if await self._judge.contradicted(
            query, item, similarity, neighbours, self, pacer or Unpaced()
        ):
            self._recorder.guard_rejected(GuardName.ANSWERS)
            return True
        return False

    async def _outside(
        self, entry_id: str, vector: np.ndarray, language: str
    ) -> tuple[Indexed, float] | None:
        """An entry that is not among the query's nearest, with its similarity to the query,
        read from its record (None: gone, unreadable, or of another model)."""
        fields = [META, ANALYSIS, ANSWER_VECTOR, RESCORE_VECTOR, VECTOR]
        key = record_key(self._prefix, entry_id)
        async with self._conn.guard(key) as client:
            values = await client.hmget(key, fields)
        item = self._candidate(
            {name: value for name, value in zip(fields, values, strict=True) if value is not None},
            language,
        )
        own = _vector(values[-1], self._dims.get(language, 0))
        if item is None or own is None:
            return None
        return item, self._thresholds.similarity(language, float(np.dot(vector, own)))

    async def _neighbours(
        self, partition: str, vector: np.ndarray, language: str, relaxed: bool = False
    ) -> Neighbours:
        """The `candidates` nearest records of the partition and language, best first, with
        their similarity on the common scale; fresh ones only (within grace when relaxed)."""
        if self._wanted and not self._dims:
            await self._create()  # Redis was unreachable when `start` was called
        index = self.index_of(language)
        if index is None or vector.shape != (self._dims[language],):
            return []
        k = self._config.candidates
        command = [
            "FT.SEARCH",
            index,
            tag_query(search_tag(partition, language), k, self._config.hnsw_ef_search),
            "PARAMS",
            2,
            "q",
            np.ascontiguousarray(vector, dtype=np.float32).tobytes(),
            "SORTBY",
            _DISTANCE,
            "RETURN",
            len(_RETURNED),
            *_RETURNED,
            "LIMIT",
            0,
            k,
            "DIALECT",
            2,
        ]
        async with self._conn.guard() as client:
            reply = await client.execute_command(*command)
        now = self._clock.time()
        live: Neighbours = []
        for fields in search_results(reply):
            item = self._candidate(fields, language)
            if item is None or now >= (item.hard_expires_at if relaxed else item.expires_at):
                continue
            cosine = 1.0 - float(fields[_DISTANCE])
            live.append((item, self._thresholds.similarity(language, cosine)))
        return live

    def _candidate(self, fields: dict[str, bytes], language: str) -> Indexed | None:
        """A candidate's record as the judge reads it; None when it cannot be read (another
        format version, a damaged record: not ours to serve)."""
        try:
            entry = decode_without_body(fields)
            analysis = Analysis.from_wire(entry.analysis or "")
        except (CorruptEntry, ValueError, KeyError, TypeError):
            return None
        _keep(
            self._recent_answers, entry.entry_id, _vector(entry.answer_vector, self._dims[language])
        )
        _keep(
            self._recent_rescores, entry.entry_id, _vector(entry.rescore_vector, self._rescore_dim)
        )
        return Indexed.of(entry, -1, analysis)

    def answer_vector(self, entry_id: str) -> np.ndarray | None:
        """The answer vector of a recent candidate (`RECENT_ANSWERS`); None for others."""
        return self._recent_answers.get(entry_id)

    def answer(self, item: Indexed) -> np.ndarray | None:
        """For the judge: a candidate's answer vector, as its search just returned it."""
        return self.answer_vector(item.entry_id)

    def rescore(self, item: Indexed) -> np.ndarray | None:
        """For the judge: a candidate's second-model vector, as its search just returned it."""
        return self._recent_rescores.get(item.entry_id)

    async def add(self, entry: Entry) -> None:
        return None  # Redis indexes the record as the Redis tier writes it

    async def update(self, entry: Entry) -> None:
        return None  # the record's new fields are read at the next search

    async def remove(self, entry_id: str) -> bool:
        return False  # the record's deletion takes it out of Redis's index

    async def invalidate(self, selector: Invalidation) -> int:
        return 0  # as for `remove`: the Redis tier deletes the records

    def size(self) -> int:
        return 0  # held by this replica: none (Redis's FT.INFO counts what Redis holds)


def _vector(raw: bytes | None, dim: int) -> np.ndarray | None:
    """A float32 vector of `dim` dimensions (another model's is not comparable: None)."""
    if raw is None or not dim:
        return None
    vector = np.frombuffer(raw, dtype=np.float32)
    return vector if vector.shape == (dim,) else None


def _keep(recent: OrderedDict[str, np.ndarray], entry_id: str, vector: np.ndarray | None) -> None:
    """Keep `vector` as the newest of `recent`, the oldest past `RECENT_ANSWERS` dropped."""
    if vector is None:
        return
    recent[entry_id] = vector
    recent.move_to_end(entry_id)
    if len(recent) > RECENT_ANSWERS:
        recent.popitem(last=False)
