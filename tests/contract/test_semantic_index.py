"""One contract, every semantic index (`tiers.semantic.protocol.SemanticIndex`): the semantic tier
with flat partitions, the semantic tier with HNSW partitions, and the null index of a
deployment with the semantic tier off (the laws that hold for it too).

Real FAISS, real meaning guards, a manual clock. The vectors are hand-made unit vectors in 8
dimensions: each entry lies at a chosen cosine from the query (0.97, 0.95, 0.85) along an axis
of its own, or on an axis of its own alone (cosine 0 with every other), so every expected
similarity and order is exact and far from the 0.9 threshold. The HNSW partitions answer
exactly here: with fewer vectors than M (16) FAISS links every node to every other, and
efSearch (16) is at least the number of vectors, so each search scores every vector (see
tests/contract/test_partition_index.py).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from core.clock import ManualClock
from core.errors import CorruptEntry
from core.semantic_config import SemanticConfig
from normalize.meaning.signature import Analysis, MeaningSignature
from tests.support.entries import TAG, make_entry
from tests.support.semantic_tier import semantic_tier
from tiers.base import Entry, Invalidation
from tiers.semantic.protocol import NullSemanticIndex, SemanticIndex
from tiers.semantic.tier import SemanticTier
from tiers.semantic.vector_index import VectorIndex

DIM = 8
THRESHOLD = 0.9
# Entries from tests.support.entries are stored at 1_700_001_000 for 300 s (+ 60 s grace).
NOW_S = 1_700_001_010.0
STORED_S = 1_700_001_000.0
P1 = TAG + "p" * 48
P2 = TAG + "q" * 48

ANALYSIS = Analysis(("reset", "pin"), MeaningSignature(), words=frozenset({"reset", "pin"}))

VARIANTS: dict[str, dict[str, Any]] = {
    "flat": {"flat_max_entries": 1_000},
    # flat_max_entries 0: a partition's first vector already asks for the graph.
    "hnsw": {"flat_max_entries": 0},
}


def axis(n: int) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[n] = 1.0
    return vector


def near(cosine: float, own_axis: int) -> np.ndarray:
    """A unit vector at `cosine` from the query (axis 0), off along an axis of its own; two of
    them are at the product of their cosines from each other."""
    return (cosine * axis(0) + math.sqrt(1.0 - cosine**2) * axis(own_axis)).astype(np.float32)


QUERY = axis(0)


def indexed(name: str, vector: np.ndarray, partition: str = P1, **fields: Any) -> Entry:
    return make_entry(
        name,
        partition=partition,
        analysis=ANALYSIS.to_wire(),
        vector=vector.astype(np.float32).tobytes(),
        **fields,
    )


A = indexed("a", near(0.97, 1))
B = indexed("b", near(0.95, 2))
C = indexed("c", near(0.85, 3))


def build_tier(variant: str, **overrides: Any) -> SemanticTier:
    config = SemanticConfig(
        **{
            "threshold": THRESHOLD,
            "hnsw_m": 16,
            "hnsw_ef_search": 16,
            "candidates": 4,
            "answer_margin": 0.10,
            **VARIANTS[variant],
            **overrides,
        }
    )
    return semantic_tier(config, ManualClock(wall_start_s=NOW_S), DIM)


Build = Callable[..., SemanticTier]


@pytest.fixture(params=list(VARIANTS))
async def build(request: pytest.FixtureRequest) -> AsyncIterator[Build]:
    """Semantic tiers of this variant; keyword arguments override its config."""
    built: list[SemanticTier] = []

    def factory(**overrides: Any) -> SemanticTier:
        built.append(build_tier(request.param, **overrides))
        return built[-1]

    yield factory
    for tier in built:
        await tier.close()


@pytest.fixture
def tier(build: Build) -> SemanticTier:
    return build()


@pytest.fixture(params=[*VARIANTS, "null"])
async def any_index(request: pytest.FixtureRequest) -> AsyncIterator[SemanticIndex]:
    if request.param == "null":
        yield NullSemanticIndex()
        return
    tier = build_tier(request.param)
    yield tier
    await tier.close()


async def settled(index: SemanticIndex) -> None:
    """Wait for the rebuilds the tier queued in its rebuild thread. Calls there run one at a
    time in order, so a no-op queued now returns after them; then one loop turn for their
    done-callbacks. (The tier has no public way to wait; the old index would serve meanwhile,
    but then the HNSW variant would search flat indexes.)"""
    if isinstance(index, SemanticTier):
        await index._rebuild_thread.run(lambda: None)
        await asyncio.sleep(0)


async def add_all(index: SemanticIndex, *entries: Entry) -> None:
    for entry in entries:
        await index.add(entry)
        await settled(index)


async def found(
    index: SemanticIndex,
    vector: np.ndarray = QUERY,
    partition: str = P1,
    query: Analysis = ANALYSIS,
    threshold_override: float | None = None,
) -> list[tuple[str, float]]:
    """(entry name, similarity to 4 places) of what a search returns."""
    candidates = await index.search(partition, vector, query, threshold_override)
    return [(c.entry_id.split("-", 1)[1], round(c.similarity, 4)) for c in candidates]


def is_graph(tier: SemanticTier, partition: str) -> bool:
    # The tier exposes no index shape; the test reads it to prove which shape it searched.
    index = tier._held.indexes[(partition, "en")]
    assert isinstance(index, VectorIndex)
    return index.is_hnsw


# --- laws every implementation keeps, the null index included ------------------------------


async def test_an_empty_index_finds_nothing(any_index: SemanticIndex) -> None:
    assert any_index.size() == 0
    assert await found(any_index) == []
    assert await found(any_index, threshold_override=0.0) == []
    assert not await any_index.contradicts(P1, QUERY, ANALYSIS, A.entry_id)
    assert any_index.answer_vector(A.entry_id) is None
    assert not await any_index.remove(A.entry_id)
    assert await any_index.invalidate(Invalidation()) == 0


async def test_an_index_emptied_again_finds_nothing(any_index: SemanticIndex) -> None:
    await add_all(any_index, A)
    await any_index.remove(A.entry_id)
    assert any_index.size() == 0
    assert await found(any_index, vector=near(0.97, 1)) == []


async def test_the_null_index_never_holds_an_entry() -> None:
    index = NullSemanticIndex()
    await index.add(A)
    await index.update(replace(A, answer_vector=axis(7).tobytes()))
    assert index.size() == 0
    assert await found(index, vector=near(0.97, 1)) == []
    assert index.answer_vector(A.entry_id) is None


# --- the storing implementations -----------------------------------------------------------


async def test_each_variant_searches_the_shape_it_is_named_for(
    tier: SemanticTier, request: pytest.FixtureRequest
) -> None:
    await add_all(tier, A, B)
    assert is_graph(tier, P1) == (request.node.callspec.params["build"] == "hnsw")


async def test_search_finds_the_nearest_entry_that_passes(tier: SemanticTier) -> None:
    await add_all(tier, C, B, A)
    assert await found(tier) == [("a", 0.97)]
    assert await found(tier, vector=near(0.95, 2)) == [("b", 1.0)]
    await tier.remove(A.entry_id)
    assert await found(tier) == [("b", 0.95)]


async def test_nothing_is_found_below_the_threshold(tier: SemanticTier) -> None:
    await add_all(tier, C)
    assert await found(tier) == []  # 0.85 < 0.9
    assert tier.size() == 1


async def test_an_entry_below_its_own_floor_is_passed_over(tier: SemanticTier) -> None:
    await add_all(tier, replace(A, threshold=0.99), B)
    assert await found(tier) == [("b", 0.95)]  # a: 0.97 < its floor 0.99


async def test_a_relaxed_threshold_applies_instead(tier: SemanticTier) -> None:
    await add_all(tier, C, replace(B, threshold=0.99))
    assert await found(tier, threshold_override=0.8) == [("b", 0.95)]  # its floor ignored too
    await tier.remove(B.entry_id)
    assert await found(tier, threshold_override=0.8) == [("c", 0.85)]
    assert await found(tier, threshold_override=0.86) == []


async def test_expired_entries_answer_only_relaxed_lookups(tier: SemanticTier) -> None:
    in_grace = replace(A, stored_at=NOW_S - 330.0)  # expired 30 s ago, gone in 30 s
    gone = replace(B, stored_at=NOW_S - 400.0)  # past TTL + grace
    await add_all(tier, in_grace, gone)
    assert await found(tier) == []
    assert await found(tier, threshold_override=THRESHOLD) == [("a", 0.97)]
    assert await found(tier, vector=near(0.95, 2), threshold_override=0.0) == [("a", 0.9215)]


async def test_sweep_drops_only_entries_past_ttl_plus_grace(tier: SemanticTier) -> None:
    await add_all(tier, A, replace(B, stored_at=NOW_S - 330.0), replace(C, stored_at=NOW_S - 400.0))
    assert await tier.sweep() == 1
    assert tier.size() == 2
    assert not await tier.remove(C.entry_id)  # swept out
    assert await tier.remove(B.entry_id)  # in its grace: kept


async def test_partitions_are_kept_apart(tier: SemanticTier) -> None:
    await add_all(tier, A)
    assert await found(tier, vector=near(0.97, 1), partition=P2) == []
    elsewhere = indexed("a2", near(0.97, 1), partition=P2)
    await add_all(tier, elsewhere)
    assert await found(tier, partition=P2) == [("a2", 0.97)]
    assert await found(tier, partition=P1) == [("a", 0.97)]
    await tier.remove(A.entry_id)
    assert await found(tier, partition=P1) == []
    assert await found(tier, partition=P2) == [("a2", 0.97)]


async def test_removed_entries_are_never_found(tier: SemanticTier) -> None:
    await add_all(tier, A, B)
    assert await tier.remove(A.entry_id)
    assert not await tier.remove(A.entry_id)
    assert await found(tier, vector=near(0.97, 1)) == [("b", 0.9215)]  # a's own vector
    assert await found(tier, vector=near(0.97, 1), threshold_override=0.0) == [("b", 0.9215)]


async def test_size_counts_indexed_entries_over_every_partition(tier: SemanticTier) -> None:
    await add_all(tier, A, B, indexed("c2", near(0.85, 3), partition=P2))
    assert tier.size() == 3
    await add_all(
        tier,
        replace(C, vector=None),  # nothing to index
        replace(C, analysis=None),  # nothing to guard with
        replace(C, vector=np.ones(DIM + 1, dtype=np.float32).tobytes()),  # another model's
    )
    assert tier.size() == 3
    await tier.remove(B.entry_id)
    assert tier.size() == 2


async def test_past_max_entries_the_least_recently_used_goes(build: Build) -> None:
    tier = build(max_entries=2)
    x = indexed("x", axis(1))
    y = indexed("y", axis(2), partition=P2)  # the bound covers every partition together
    z = indexed("z", axis(3))
    await add_all(tier, x, y)
    assert await found(tier, vector=axis(1)) == [("x", 1.0)]  # x used after y
    await add_all(tier, z)
    assert tier.size() == 2
    assert await found(tier, vector=axis(2), partition=P2, threshold_override=0.0) == []
    assert await found(tier, vector=axis(1)) == [("x", 1.0)]
    assert await found(tier, vector=axis(3)) == [("z", 1.0)]


async def test_adding_an_indexed_entry_again_replaces_its_threshold(tier: SemanticTier) -> None:
    await add_all(tier, A)
    await add_all(tier, replace(A, threshold=0.99))
    assert tier.size() == 1
    assert await found(tier) == []  # 0.97 < 0.99
    await add_all(tier, replace(A, threshold=0.0))
    assert tier.size() == 1
    assert await found(tier) == [("a", 0.97)]


async def test_update_takes_a_new_threshold_and_ttl(tier: SemanticTier) -> None:
    await add_all(tier, A)
    await tier.update(replace(A, threshold=0.99))
    assert await found(tier) == []
    await tier.update(replace(A, stored_at=NOW_S - 330.0))  # floor back to none, now expired
    assert await found(tier) == []
    assert await found(tier, threshold_override=THRESHOLD) == [("a", 0.97)]
    await tier.update(replace(A, stored_at=STORED_S))
    assert await found(tier) == [("a", 0.97)]
    await tier.update(B)  # not indexed: nothing changes
    assert tier.size() == 1
    assert await found(tier, vector=near(0.95, 2)) == [("a", 0.9215)]


async def test_invalidate_by_tenant_namespace_and_model(tier: SemanticTier) -> None:
    await add_all(
        tier,
        replace(A, tenant="t1"),
        replace(B, tenant="t1", namespace="docs"),
        replace(C, tenant="t2", model="other"),
    )
    assert await tier.invalidate(Invalidation(tenant="t1", namespace="docs")) == 1
    assert await tier.invalidate(Invalidation(model="other")) == 1
    assert tier.size() == 1
    assert await found(tier, threshold_override=0.0) == [("a", 0.97)]
    assert await tier.invalidate(Invalidation()) == 1
    assert tier.size() == 0 and await found(tier, threshold_override=0.0) == []


async def test_the_answer_vector_is_there_once_attached(tier: SemanticTier) -> None:
    await add_all(tier, A)
    assert tier.answer_vector(A.entry_id) is None
    await tier.update(replace(A, answer_vector=np.ones(DIM + 1, dtype=np.float32).tobytes()))
    assert tier.answer_vector(A.entry_id) is None  # another model's: not comparable
    await tier.update(replace(A, answer_vector=axis(7).tobytes()))
    answer = tier.answer_vector(A.entry_id)
    assert answer is not None and np.array_equal(answer, axis(7))
    assert tier.answer_vector(B.entry_id) is None


async def test_a_close_neighbour_answered_differently_refuses_the_hit(tier: SemanticTier) -> None:
    # a (0.97) and b (0.95) are within the 0.10 answer margin; their answers are orthogonal.
    await add_all(
        tier,
        replace(A, answer_vector=axis(6).tobytes()),
        replace(B, answer_vector=axis(7).tobytes()),
    )
    assert await found(tier) == []
    assert await tier.contradicts(P1, QUERY, ANALYSIS, A.entry_id)


async def test_a_close_neighbour_answered_alike_lets_the_hit_through(tier: SemanticTier) -> None:
    await add_all(
        tier,
        replace(A, answer_vector=axis(6).tobytes()),
        replace(B, answer_vector=axis(6).tobytes()),
    )
    assert await found(tier) == [("a", 0.97)]
    assert not await tier.contradicts(P1, QUERY, ANALYSIS, A.entry_id)


async def test_a_neighbour_past_the_answer_margin_cannot_contradict(tier: SemanticTier) -> None:
    # c (0.85) is further than 0.10 from a (0.97): its different answer does not count.
    await add_all(
        tier,
        replace(A, answer_vector=axis(6).tobytes()),
        replace(C, answer_vector=axis(7).tobytes()),
    )
    assert await found(tier) == [("a", 0.97)]
    assert not await tier.contradicts(P1, QUERY, ANALYSIS, A.entry_id)


async def test_a_query_the_guards_reject_finds_nothing(tier: SemanticTier) -> None:
    await add_all(tier, A)
    assert await found(tier, query=Analysis.opaque("how do i reset my pin")) == []


async def test_an_unreadable_analysis_is_a_corrupt_entry(tier: SemanticTier) -> None:
    with pytest.raises(CorruptEntry):
        await tier.add(replace(A, analysis="{not json"))
    assert tier.size() == 0


async def test_past_flat_max_entries_a_partition_becomes_a_graph_finding_every_entry(
    build: Build,
) -> None:
    tier = build(flat_max_entries=3)
    entries = [indexed(f"e{n}", axis(n)) for n in range(1, 5)]
    await add_all(tier, *entries[:3])
    assert not is_graph(tier, P1)  # flat up to flat_max_entries
    await add_all(tier, entries[3], indexed("other", axis(5), partition=P2))
    assert is_graph(tier, P1) and not is_graph(tier, P2)
    await add_all(tier, indexed("e5", axis(5)), indexed("e6", axis(6)))  # into the graph
    for n in range(1, 7):
        assert await found(tier, vector=axis(n)) == [(f"e{n}", 1.0)]
    assert await tier.remove(entries[0].entry_id)
    assert await found(tier, vector=axis(1)) == []  # every other entry is at cosine 0
    assert await found(tier, vector=axis(2)) == [("e2", 1.0)]
    assert tier.size() == 6  # five in the graph, one in the other partition
