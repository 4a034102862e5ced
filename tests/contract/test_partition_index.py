"""One contract, every shape of a partition's vector index (`tiers.base.PartitionIndex`): flat in
one part, flat in several parts, and the HNSW graph, all on real FAISS.

The vectors are hand-made unit vectors in 8 dimensions whose cosines with the query are 1.0,
0.8, 0.6, 0.0 and -0.6, far apart, so every expected order is exact. HNSW answers exactly here,
not approximately: FAISS prunes a node's neighbour list only once it has more candidates than
M, so with fewer vectors than M (16 here, at most 8 vectors) every node links to every other
and the graph is complete; and with efSearch (16) at least the number of vectors, the beam
search keeps every node it reaches. Each search therefore scores every vector, as a flat one
does.
"""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from tiers.base import PartitionIndex
from tiers.semantic import vector_index
from tiers.semantic.vector_index import GraphShape, VectorIndex, best_of

DIM = 8
M = 16
EF_SEARCH = 16

Index = PartitionIndex[faiss.Index]


def unit(*components: float) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[: len(components)] = components
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-6, "a test vector must be unit length"
    return vector


QUERY = unit(1.0)
# id: (vector, its cosine with QUERY)
GRADED = {
    11: (unit(1.0), 1.0),
    12: (unit(0.8, 0.6), 0.8),
    13: (unit(0.6, 0.0, 0.8), 0.6),
    14: (unit(0.0, 0.0, 0.0, 1.0), 0.0),
    15: (unit(-0.6, 0.0, 0.0, 0.0, 0.8), -0.6),
}
# Not in the order of their cosines: the order of results must come from the scores.
ADD_ORDER = [14, 12, 15, 11, 13]


@pytest.fixture(params=["flat", "flat_in_parts", "hnsw"])
def index(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Index:
    if request.param == "flat_in_parts":
        # The part size is a module constant (1,024); at 2 a handful of vectors spans three
        # parts, which would otherwise take thousands of vectors.
        monkeypatch.setattr(vector_index, "PART_VECTORS", 2)
    # flat_max 0: the first vector already asks for the graph, so every later add goes into it.
    flat_max = 0 if request.param == "hnsw" else 1_000
    return VectorIndex(DIM, flat_max=flat_max, graph=GraphShape(M, 40, EF_SEARCH))


def add(index: Index, vector_id: int, vector: np.ndarray) -> None:
    """Add as the semantic tier does: rebuild when the index asks for it (the tier runs the
    rebuild in a worker thread; here it runs at once)."""
    index.add(vector_id, vector)
    if index.wants_rebuild():
        index.rebuild()


def remove(index: Index, vector_id: int) -> bool:
    removed = index.remove(vector_id)
    if index.wants_rebuild():
        index.rebuild()
    return removed


def add_graded(index: Index) -> None:
    for vector_id in ADD_ORDER:
        add(index, vector_id, GRADED[vector_id][0])


def rounded(found: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(vector_id, round(similarity, 5)) for vector_id, similarity in found]


def part_by_part(index: Index, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The semantic tier's search on the event loop: each part on its own, merged."""
    return best_of([index.search_part(part, vector, k) for part in index.parts()], k)


def test_each_variant_has_the_shape_it_is_named_for(
    index: Index, request: pytest.FixtureRequest
) -> None:
    add_graded(index)
    assert isinstance(index, VectorIndex)
    variant = request.node.callspec.params["index"]
    assert index.is_hnsw == (variant == "hnsw")
    assert len(index.parts()) == {"flat": 1, "flat_in_parts": 3, "hnsw": 1}[variant]


def test_search_finds_the_nearest_first_with_their_cosines(index: Index) -> None:
    add_graded(index)
    expected = [(11, 1.0), (12, 0.8), (13, 0.6), (14, 0.0), (15, -0.6)]
    assert rounded(index.search(QUERY, 5)) == expected
    assert rounded(part_by_part(index, QUERY, 5)) == expected
    # Another query, another order: cosines with (0.8, 0.6) are 0.8, 1.0, 0.48, 0.0, -0.48.
    assert [i for i, _ in index.search(GRADED[12][0], 5)] == [12, 11, 13, 14, 15]


def test_search_returns_at_most_k(index: Index) -> None:
    add_graded(index)
    assert rounded(index.search(QUERY, 2)) == [(11, 1.0), (12, 0.8)]
    assert rounded(part_by_part(index, QUERY, 2)) == [(11, 1.0), (12, 0.8)]
    assert len(index.search(QUERY, 50)) == 5  # never more than are held


def test_an_empty_index_finds_nothing(index: Index) -> None:
    assert len(index) == 0
    assert index.search(QUERY, 4) == []
    assert part_by_part(index, QUERY, 4) == []
    assert index.vector(11) is None


def test_removed_vectors_are_never_found(index: Index) -> None:
    add_graded(index)
    assert remove(index, 11)
    assert not remove(index, 11)
    assert not remove(index, 99)
    assert len(index) == 4
    assert index.vector(11) is None
    assert [i for i, _ in index.search(QUERY, 5)] == [12, 13, 14, 15]
    assert [i for i, _ in part_by_part(index, QUERY, 5)] == [12, 13, 14, 15]


def test_an_index_emptied_again_finds_nothing(index: Index) -> None:
    add_graded(index)
    for vector_id in ADD_ORDER:
        assert remove(index, vector_id)
    assert len(index) == 0
    assert index.search(QUERY, 4) == []
    assert part_by_part(index, QUERY, 4) == []


def test_size_counts_the_vectors_held(index: Index) -> None:
    for held, vector_id in enumerate(ADD_ORDER, 1):
        add(index, vector_id, GRADED[vector_id][0])
        assert len(index) == held
    remove(index, 13)
    remove(index, 14)
    assert len(index) == 3


def test_vector_returns_what_was_added(index: Index) -> None:
    add_graded(index)
    for vector_id, (vector, _) in GRADED.items():
        held = index.vector(vector_id)
        assert held is not None and np.array_equal(held, vector)


def test_adds_after_removals_are_found(index: Index) -> None:
    add_graded(index)
    remove(index, 11)
    remove(index, 12)
    newcomer = unit(0.28, 0.96)  # cosine 0.28 with the query, between 13 (0.6) and 14 (0.0)
    add(index, 21, newcomer)
    assert len(index) == 4
    assert rounded(index.search(newcomer, 1)) == [(21, 1.0)]
    expected = [(13, 0.6), (21, 0.28), (14, 0.0), (15, -0.6)]
    assert rounded(index.search(QUERY, 4)) == expected
    assert rounded(part_by_part(index, QUERY, 4)) == expected


def test_a_rebuild_keeps_every_vector_held_and_drops_removed_ones(index: Index) -> None:
    add_graded(index)
    remove(index, 12)
    index.rebuild()
    assert len(index) == 4
    assert rounded(index.search(QUERY, 5)) == [(11, 1.0), (13, 0.6), (14, 0.0), (15, -0.6)]
    assert rounded(part_by_part(index, QUERY, 5)) == [(11, 1.0), (13, 0.6), (14, 0.0), (15, -0.6)]


def test_past_flat_max_it_becomes_a_graph_that_finds_every_vector() -> None:
    index: Index = VectorIndex(DIM, flat_max=4, graph=GraphShape(M, 40, EF_SEARCH))
    axes = [unit(*([0.0] * axis + [1.0])) for axis in range(DIM)]  # one-hot: cosines 1 or 0
    for vector_id in range(4):
        index.add(vector_id, axes[vector_id])
        assert not index.wants_rebuild()  # flat up to flat_max vectors
    index.add(4, axes[4])
    assert index.wants_rebuild()  # one past it
    index.rebuild()
    assert isinstance(index, VectorIndex) and index.is_hnsw and len(index.parts()) == 1
    for vector_id in range(5, DIM):  # added to the graph itself
        add(index, vector_id, axes[vector_id])
    for vector_id in range(DIM):
        assert rounded(index.search(axes[vector_id], 1)) == [(vector_id, 1.0)]
    assert remove(index, 3)
    assert 3 not in [i for i, _ in index.search(axes[3], DIM)]
    assert len(index.search(axes[3], DIM)) == DIM - 1
    # Shrunk back to flat_max, a rebuild makes it flat again, still finding every vector.
    for vector_id in (4, 5, 6):
        remove(index, vector_id)
    index.rebuild()
    assert not index.is_hnsw and len(index) == 4
    for vector_id in (0, 1, 2, 7):
        assert rounded(index.search(axes[vector_id], 1)) == [(vector_id, 1.0)]
