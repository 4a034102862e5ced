"""VectorIndex: a flat index in parts that together answer like one; HNSW past `flat_max`."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from tiers.semantic import vector_index
from tiers.semantic.vector_index import PART_VECTORS, GraphShape, VectorIndex, best_of

DIM = 16


def unit_vectors(n: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def brute_force(live: dict[int, np.ndarray], query: np.ndarray, k: int) -> list[int]:
    ids = list(live)
    scores = np.stack([live[i] for i in ids]) @ query
    return [ids[j] for j in np.argsort(-scores)[:k]]


def test_a_flat_index_in_parts_finds_what_one_exhaustive_search_finds() -> None:
    index = VectorIndex(DIM, flat_max=100_000, graph=GraphShape(16, 40, 32))
    vectors = unit_vectors(2500, seed=1)
    live = {}
    for vector_id, vector in enumerate(vectors, 1):
        index.add(vector_id, vector)
        live[vector_id] = vector
    parts = index.parts()
    assert len(parts) == 3 and all(part.ntotal <= PART_VECTORS for part in parts)
    for query in unit_vectors(20, seed=2):
        found = index.search(query, 4)
        assert [i for i, _ in found] == brute_force(live, query, 4)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_removals_leave_room_that_later_adds_fill() -> None:
    index = VectorIndex(DIM, flat_max=100_000, graph=GraphShape(16, 40, 32))
    live = dict(enumerate(unit_vectors(2500, seed=3), 1))
    for vector_id, vector in live.items():
        index.add(vector_id, vector)
    for vector_id in range(1, 501):  # all from the first part
        assert index.remove(vector_id)
        del live[vector_id]
    assert not index.remove(1)
    for vector_id, vector in enumerate(unit_vectors(500, seed=4), 10_001):
        index.add(vector_id, vector)
        live[vector_id] = vector
    assert len(index.parts()) == 3 and len(index) == 2500
    for query in unit_vectors(20, seed=5):
        found = [i for i, _ in index.search(query, 4)]
        assert found == brute_force(live, query, 4)
        assert not any(1 <= i <= 500 for i in found)


def test_past_flat_max_it_rebuilds_as_one_graph_and_skips_tombstones() -> None:
    index = VectorIndex(DIM, flat_max=100, graph=GraphShape(16, 40, 64))
    vectors = unit_vectors(300, seed=6)
    for vector_id, vector in enumerate(vectors, 1):
        index.add(vector_id, vector)
    assert index.wants_rebuild()
    index.rebuild()
    assert index.is_hnsw and len(index.parts()) == 1 and not index.wants_rebuild()
    assert index.search(vectors[9], 1)[0][0] == 10
    index.remove(10)
    assert 10 not in [i for i, _ in index.search(vectors[9], 4)]
    for vector_id in range(11, 11 + 300 // 4 + 16):
        index.remove(vector_id)
    assert index.wants_rebuild()  # tombstones past a quarter of the graph
    index.rebuild()
    assert index.is_hnsw and 10 not in [i for i, _ in index.search(vectors[9], 4)]


def test_the_graph_is_built_and_searched_with_its_shape_and_a_restored_one_with_todays() -> None:
    """efConstruction sets the graph's quality (bench/hnsw_tuning.py: recall@1 at 1M entries
    0.906 at 40, 0.962 at 80); a snapshot's graph keeps its links but takes the settings of
    now for its searches and its later additions."""
    index = VectorIndex(DIM, flat_max=10, graph=GraphShape(8, 77, 55))
    for vector_id, vector in enumerate(unit_vectors(40, seed=7), 1):
        index.add(vector_id, vector)
    index.rebuild()
    (part,) = index.parts()
    graph = faiss.downcast_index(part.index)
    assert (graph.hnsw.efConstruction, graph.hnsw.efSearch) == (77, 55)
    blobs, _ = index.export_parts()
    parts = [faiss.deserialize_index(blob) for blob in blobs]
    restored = VectorIndex.restore(DIM, 10, GraphShape(8, 90, 130), parts)
    (part,) = restored.parts()
    graph = faiss.downcast_index(part.index)
    assert (graph.hnsw.efConstruction, graph.hnsw.efSearch) == (90, 130)


def array_addresses(part: faiss.IndexIDMap2) -> list[int]:
    return [int(array.data()) for array in vector_index.graph_arrays(part)]


def test_a_built_or_restored_graph_grows_by_half_without_moving_then_asks_for_a_rebuild() -> None:
    """A graph's arrays sized exactly by its build or its snapshot moved at the first add,
    under the lock and on the event loop (1.1 s at 200,000 vectors: no lookup answered
    meanwhile); they are given room beforehand, in the thread that builds or restores."""
    index = VectorIndex(DIM, flat_max=100, graph=GraphShape(8, 40, 64))
    vectors = dict(enumerate(unit_vectors(2000, seed=11), 1))
    for vector_id in range(1, 1001):
        index.add(vector_id, vectors[vector_id])
    index.rebuild()
    blobs, _ = index.export_parts()
    parts = [faiss.deserialize_index(blob) for blob in blobs]
    restored = VectorIndex.restore(DIM, 100, GraphShape(8, 40, 64), parts)
    for graph in (index, restored):
        (part,) = graph.parts()
        before = array_addresses(part)
        added = 1000
        while not graph.wants_rebuild():
            added += 1
            graph.add(added, vectors[added])
        assert added == 1000 * vector_index.REGROW_AT
        assert array_addresses(part) == before
    index.rebuild()
    assert not index.wants_rebuild() and len(index) == 1500  # room again, for 750 more
    assert index.search(vectors[1400], 1)[0][0] == 1400


def test_a_rebuild_back_to_flat_splits_into_parts() -> None:
    index = VectorIndex(DIM, flat_max=PART_VECTORS * 2 + 10, graph=GraphShape(16, 40, 64))
    live = dict(enumerate(unit_vectors(PART_VECTORS * 2 + 5, seed=7), 1))
    for vector_id, vector in live.items():
        index.add(vector_id, vector)
    index.rebuild()
    assert not index.is_hnsw and len(index.parts()) == 3
    query = unit_vectors(1, seed=8)[0]
    assert [i for i, _ in index.search(query, 4)] == brute_force(live, query, 4)


def test_best_of_merges_parts_best_first_each_id_once() -> None:
    found = best_of([[(1, 0.9), (2, 0.5)], [(3, 0.95), (1, 0.9), (4, 0.1)], []], 3)
    assert found == [(3, 0.95), (1, 0.9), (2, 0.5)]


def test_a_rebuild_keeps_what_changed_while_it_built_and_reads_vectors_back_from_faiss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The graph is read back 64 vectors per hold of the lock here (4,096 shipped): in pieces.
    monkeypatch.setattr(vector_index, "COPY_VECTORS", 64)
    # The rebuild's steps run one by one here, with adds and removes between them, as the event
    # loop makes them while the worker thread builds: during the copy and the build (applied by
    # a catch-up round, without the lock), and after it (applied by the swap).
    # efSearch past the vector count: the graph's searches score every vector they reach, so
    # they answer exactly and the results can be compared with an exhaustive search.
    index = VectorIndex(DIM, flat_max=200, graph=GraphShape(16, 40, 512))
    vectors = dict(enumerate(unit_vectors(420, seed=9), 1))
    for vector_id in range(1, 301):
        index.add(vector_id, vectors[vector_id])
    index._changes = []  # as rebuild() begins: changes are logged from here on
    copied = index._copy_live()
    assert sorted(copied.ids.tolist()) == list(range(1, 301))
    for vector_id in range(301, 401):  # added meanwhile: into the old flat parts
        index.add(vector_id, vectors[vector_id])
    for vector_id in range(1, 51):  # removed meanwhile
        assert index.remove(vector_id)
    parts, part_of = index._build(copied, hnsw=True)
    tombstones: set[int] = set()
    with index._lock:
        changes = index._take_changes()
    assert len(changes) == 150
    index._apply(changes, parts, part_of, tombstones, hnsw=True)
    for vector_id in range(401, 421):  # after the catch-up round: for the swap
        index.add(vector_id, vectors[vector_id])
    for vector_id in (51, 52, 401):  # 401 added and removed before the swap
        assert index.remove(vector_id)
    index._swap(parts, part_of, tombstones, hnsw=True, regrow_at=vector_index._make_room(parts[0]))
    index._changes = None
    live = {i: v for i, v in vectors.items() if i > 52 and i != 401}
    assert index.is_hnsw and len(index) == len(live) == 367
    assert index.vector(401) is None and 401 not in [i for i, _ in index.search(vectors[401], 4)]
    # Then one more rebuild, from the graph's own storage, past a quarter of tombstones.
    for vector_id in range(53, 153):
        assert index.remove(vector_id)
        del live[vector_id]
    assert index.wants_rebuild()
    index.rebuild()
    assert index.is_hnsw and len(index) == len(live) == 267 and not index.wants_rebuild()
    assert index._changes is None
    for vector_id, vector in live.items():
        held = index.vector(vector_id)
        assert held is not None and np.array_equal(held, vector)
        assert index.search(vector, 1)[0][0] == vector_id
    assert all(index.vector(vector_id) is None for vector_id in range(1, 153))
    for query in unit_vectors(20, seed=10):
        assert [i for i, _ in index.search(query, 4)] == brute_force(live, query, 4)
