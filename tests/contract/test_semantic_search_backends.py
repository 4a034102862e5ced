"""The search laws of `SemanticIndex` that every `semantic.backend` keeps: FAISS in the replica
(tiers/semantic/tier.py) and Redis's own vector index over the stored records
(tiers/semantic/redis_search.py, on a real Redis Stack server). The same entries, queries and
expectations as tests/contract/test_semantic_index.py; what differs is how an entry gets in and
out: the FAISS tier is given it, while Redis indexes the record the Redis tier writes and
forgets it as the Redis tier deletes it or it expires.

The suite's entries are moved to the real time as they are stored (Redis expires a record at
its own wall-clock expiry), and each backend reads a manual clock moved by as much.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, replace

import pytest
import redis

from core.clock import ManualClock
from core.config import RedisConfig
from core.errors import ConfigError, TierUnavailable
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.signature import Analysis
from tests.contract.test_semantic_index import (
    ANALYSIS,
    DIM,
    NOW_S,
    P1,
    P2,
    QUERY,
    THRESHOLD,
    A,
    B,
    C,
    axis,
    found,
    indexed,
    near,
)
from tests.support.redis_server import RedisServer
from tests.support.redis_stack import INSTALL_HINT, find_redis_stack, redis_stack_server
from tiers.base import Entry
from tiers.policies.thresholds import ThresholdController
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.semantic.judge import CandidateJudge
from tiers.semantic.protocol import SemanticIndex
from tiers.semantic.redis_search import RedisSearchIndex
from tiers.semantic.tier import SemanticTier

CONFIG = SemanticConfig(
    threshold=THRESHOLD,
    hnsw_m=16,
    hnsw_ef_search=16,
    candidates=4,
    answer_margin=0.10,
    flat_max_entries=1_000,
)


@dataclass
class Backend:
    index: SemanticIndex
    put: Callable[[Entry], Awaitable[object]]
    delete: Callable[[str], Awaitable[object]]
    shift_s: float  # from the suite's times to the real ones

    async def add_all(self, *entries: Entry) -> None:
        for entry in entries:
            await self.put(replace(entry, stored_at=entry.stored_at + self.shift_s))


def parts() -> tuple[ThresholdController, CacheRecorder, ManualClock, float]:
    """The judging's parts, a clock at the suite's NOW_S moved to the real time, and the move."""
    shift_s = float(int(time.time()) - int(NOW_S))
    clock = ManualClock(wall_start_s=NOW_S + shift_s)
    thresholds = ThresholdController(VerifyConfig(), CONFIG.threshold)
    return thresholds, CacheRecorder(), clock, shift_s


@pytest.fixture(scope="module")
def stack_server() -> Iterator[RedisServer]:
    stack = find_redis_stack()
    if stack is None:
        pytest.skip(f"Redis Stack is not installed: {INSTALL_HINT}")
    with redis_stack_server(stack) as server:
        yield server


async def faiss_backend(config: SemanticConfig) -> AsyncIterator[Backend]:
    thresholds, recorder, clock, shift_s = parts()
    tier = SemanticTier(config, MeaningGuard(config), thresholds, clock, recorder)
    tier.set_dimension(DIM)
    yield Backend(tier, tier.add, tier.remove, shift_s)
    await tier.close()


async def redis_backend(server: RedisServer, semantic: SemanticConfig) -> AsyncIterator[Backend]:
    with redis.Redis.from_url(server.url) as client:
        client.flushall()  # the records, and the index with them
    thresholds, recorder, clock, shift_s = parts()
    config = RedisConfig(url=server.url)
    connection = RedisConnection(config)
    await connection.start()
    store = RedisTier(connection, config)
    judge = CandidateJudge(semantic, MeaningGuard(semantic), thresholds, recorder)
    index = RedisSearchIndex(connection, config, semantic, judge, thresholds, clock, recorder)
    await index.start({"en": DIM})
    yield Backend(index, store.put, store.delete, shift_s)
    await connection.close()


BACKENDS = ["faiss", pytest.param("redis-search", marks=pytest.mark.redis)]


async def backend_of(
    request: pytest.FixtureRequest, config: SemanticConfig
) -> AsyncIterator[Backend]:
    if request.param == "faiss":
        async for made in faiss_backend(config):
            yield made
        return
    async for made in redis_backend(request.getfixturevalue("stack_server"), config):
        yield made


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    async for made in backend_of(request, CONFIG):
        yield made


@pytest.fixture(params=BACKENDS)
async def nearest_only(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """A backend whose searches look at one candidate only."""
    async for made in backend_of(request, replace(CONFIG, candidates=1)):
        yield made


async def test_search_finds_the_nearest_entry_that_passes(backend: Backend) -> None:
    await backend.add_all(C, B, A)
    assert await found(backend.index) == [("a", 0.97)]
    assert await found(backend.index, vector=near(0.95, 2)) == [("b", 1.0)]
    await backend.delete(A.entry_id)
    assert await found(backend.index) == [("b", 0.95)]


async def test_nothing_is_found_below_the_threshold(backend: Backend) -> None:
    await backend.add_all(C)
    assert await found(backend.index) == []  # 0.85 < 0.9


async def test_an_entry_below_its_own_floor_is_passed_over(backend: Backend) -> None:
    await backend.add_all(replace(A, threshold=0.99), B)
    assert await found(backend.index) == [("b", 0.95)]  # a: 0.97 < its floor 0.99


async def test_a_relaxed_threshold_applies_instead(backend: Backend) -> None:
    await backend.add_all(C, replace(B, threshold=0.99))
    assert await found(backend.index, threshold_override=0.8) == [("b", 0.95)]
    await backend.delete(B.entry_id)
    assert await found(backend.index, threshold_override=0.8) == [("c", 0.85)]
    assert await found(backend.index, threshold_override=0.86) == []


async def test_expired_entries_answer_only_relaxed_lookups(backend: Backend) -> None:
    in_grace = replace(A, stored_at=NOW_S - 330.0)  # expired 30 s ago, gone in 30 s
    gone = replace(B, stored_at=NOW_S - 400.0)  # past TTL + grace
    await backend.add_all(in_grace, gone)
    assert await found(backend.index) == []
    assert await found(backend.index, threshold_override=THRESHOLD) == [("a", 0.97)]
    assert await found(backend.index, vector=near(0.95, 2), threshold_override=0.0) == [
        ("a", 0.9215)
    ]


async def test_partitions_are_kept_apart(backend: Backend) -> None:
    await backend.add_all(A)
    assert await found(backend.index, vector=near(0.97, 1), partition=P2) == []
    elsewhere = indexed("a2", near(0.97, 1), partition=P2)
    await backend.add_all(elsewhere)
    assert await found(backend.index, partition=P2) == [("a2", 0.97)]
    assert await found(backend.index, partition=P1) == [("a", 0.97)]
    await backend.delete(A.entry_id)
    assert await found(backend.index, partition=P1) == []
    assert await found(backend.index, partition=P2) == [("a2", 0.97)]


async def test_deleted_entries_are_never_found(backend: Backend) -> None:
    await backend.add_all(A, B)
    await backend.delete(A.entry_id)
    assert await found(backend.index, vector=near(0.97, 1)) == [("b", 0.9215)]  # a's own vector
    assert await found(backend.index, vector=near(0.97, 1), threshold_override=0.0) == [
        ("b", 0.9215)
    ]


async def test_a_close_neighbour_answered_differently_refuses_the_hit(backend: Backend) -> None:
    # a (0.97) and b (0.95) are within the 0.10 answer margin; their answers are orthogonal.
    await backend.add_all(
        replace(A, answer_vector=axis(6).tobytes()), replace(B, answer_vector=axis(7).tobytes())
    )
    assert await found(backend.index) == []
    assert await backend.index.contradicts(P1, QUERY, ANALYSIS, A.entry_id)


async def test_a_close_neighbour_answered_alike_lets_the_hit_through(backend: Backend) -> None:
    await backend.add_all(
        replace(A, answer_vector=axis(6).tobytes()), replace(B, answer_vector=axis(6).tobytes())
    )
    assert await found(backend.index) == [("a", 0.97)]
    assert not await backend.index.contradicts(P1, QUERY, ANALYSIS, A.entry_id)


async def test_a_neighbour_past_the_answer_margin_cannot_contradict(backend: Backend) -> None:
    await backend.add_all(
        replace(A, answer_vector=axis(6).tobytes()), replace(C, answer_vector=axis(7).tobytes())
    )
    assert await found(backend.index) == [("a", 0.97)]
    assert not await backend.index.contradicts(P1, QUERY, ANALYSIS, A.entry_id)


async def test_an_entry_outside_the_nearest_is_still_checked_against_them(
    nearest_only: Backend,
) -> None:
    # b (0.95) is not the one nearest; a (0.97) is, within the margin, answered differently.
    await nearest_only.add_all(
        replace(A, answer_vector=axis(6).tobytes()), replace(B, answer_vector=axis(7).tobytes())
    )
    assert await nearest_only.index.contradicts(P1, QUERY, ANALYSIS, B.entry_id)
    assert not await nearest_only.index.contradicts(P1, QUERY, ANALYSIS, "no-such-entry")


async def test_a_candidates_answer_vector_is_there_after_its_search(backend: Backend) -> None:
    await backend.add_all(replace(A, answer_vector=axis(6).tobytes()), B)
    assert await found(backend.index) == [("a", 0.97)]
    answer = backend.index.answer_vector(A.entry_id)
    assert answer is not None and answer.tolist() == axis(6).tolist()
    assert backend.index.answer_vector(B.entry_id) is None  # none attached


async def test_a_query_the_guards_reject_finds_nothing(backend: Backend) -> None:
    await backend.add_all(A)
    assert await found(backend.index, query=Analysis.opaque("how do i reset my pin")) == []


# --- Redis's index alone -------------------------------------------------------------------


@pytest.mark.redis
async def test_records_stored_before_the_index_are_found_once_redis_indexed_them(
    stack_server: RedisServer,
) -> None:
    with redis.Redis.from_url(stack_server.url) as client:
        client.flushall()
    thresholds, recorder, clock, shift_s = parts()
    config = RedisConfig(url=stack_server.url)
    connection = RedisConnection(config)
    await connection.start()
    try:
        await RedisTier(connection, config).put(replace(A, stored_at=A.stored_at + shift_s))
        judge = CandidateJudge(CONFIG, MeaningGuard(CONFIG), thresholds, recorder)
        index = RedisSearchIndex(connection, config, CONFIG, judge, thresholds, clock, recorder)
        await index.start({"en": DIM})
        for _ in range(500):  # Redis indexes what it holds in the background
            if await index.indexing_done() >= 1.0:
                break
            await asyncio.sleep(0.01)
        assert await found(index) == [("a", 0.97)]
        assert index.size() == 0  # the replica holds nothing
    finally:
        await connection.close()


@pytest.mark.redis
async def test_a_redis_without_the_search_module_is_a_configuration_error() -> None:
    thresholds, recorder, clock, _ = parts()
    with RedisServer() as plain:  # Debian's redis-server: no modules
        config = RedisConfig(url=plain.url)
        connection = RedisConnection(config)
        await connection.start()
        judge = CandidateJudge(CONFIG, MeaningGuard(CONFIG), thresholds, recorder)
        index = RedisSearchIndex(connection, config, CONFIG, judge, thresholds, clock, recorder)
        try:
            with pytest.raises(ConfigError, match=r"semantic\.backend redis-search"):
                await index.start({"en": DIM})
        finally:
            await connection.close()


@pytest.mark.redis
async def test_redis_down_finds_nothing_and_the_index_comes_once_it_is_back(
    stack_server: RedisServer,
) -> None:
    """With Redis unreachable a search is a counted Redis error and no candidate (the request
    goes upstream), as the Redis tier's own lookups are; an index `start` could not create
    is created by the first search once Redis answers again."""
    with redis.Redis.from_url(stack_server.url) as client:
        client.flushall()
    thresholds, recorder, clock, shift_s = parts()
    config = RedisConfig(url=stack_server.url, probe_interval_s=0.05)
    connection = RedisConnection(config)
    await connection.start()
    judge = CandidateJudge(CONFIG, MeaningGuard(CONFIG), thresholds, recorder)
    index = RedisSearchIndex(connection, config, CONFIG, judge, thresholds, clock, recorder)
    stack_server.stop()
    try:
        with pytest.raises(TierUnavailable):
            await index.start({"en": DIM})
        assert await found(index) == []
        assert not await index.contradicts(P1, QUERY, ANALYSIS, A.entry_id)
        assert recorder.snapshot().tier_errors["redis"] == 2
    finally:
        stack_server.start()
    try:
        store = RedisTier(connection, config)
        for _ in range(200):  # until the connection's probe finds Redis back
            try:
                await store.put(replace(A, stored_at=A.stored_at + shift_s))
                break
            except TierUnavailable:
                await asyncio.sleep(0.05)
        await found(index)  # creates the index; Redis indexes `a` in the background
        for _ in range(500):
            if await index.indexing_done() >= 1.0:
                break
            await asyncio.sleep(0.01)
        assert await found(index) == [("a", 0.97)]
    finally:
        await connection.close()
