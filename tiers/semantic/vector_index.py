"""One partition's vectors in FAISS: exact (flat inner product) while small, HNSW past a size.

Vectors are L2-normalized, so inner product is cosine similarity. Ids are int64s chosen by the
caller. A flat index is held in parts of at most `PART_VECTORS` vectors, each searched on its
own: a flat search costs about 60 ns a vector here, so one part is about 60 µs, and a caller on
the event loop can let other work run between parts instead of scanning 3,000 vectors (0.2 ms)
in one step. A new vector goes into the first part with room, so removals leave no holes that
grow the part count. A flat index removes ids for real; HNSW (one part, the graph) cannot, so
removed ids become tombstones that searches skip. `wants_rebuild()` says when the index should
change shape (the flat index outgrew `flat_max`, tombstones pass a quarter of the graph, or
the graph grew half again past the room it was given: `_make_room`);
`rebuild()` then copies the live vectors out of FAISS (which holds the only copy of each) a piece
at a time, builds the new index without holding the lock (building HNSW costs about a
millisecond a vector here), and swaps it in with whatever changed meanwhile.
Every other operation holds the lock, because searches of large indexes and rebuilds run in
worker threads while adds and removes come from the event loop.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from core.semantic_config import SemanticConfig

Vector = np.ndarray
Found = list[tuple[int, float]]

# Vectors in one part of a flat index.
PART_VECTORS = 1024


# A rebuild applies what changed meanwhile in rounds without the lock, until a round finds at
# most SWAP_CHANGES changes (the swap applies those under the lock), or CATCH_UP_ROUNDS passed
# (under a stream of additions faster than the graph takes them).
CATCH_UP_ROUNDS = 8
SWAP_CHANGES = 8

# Vectors of the HNSW graph copied out per hold of the lock while a rebuild reads them: 4,096 ×
# 384 × 4 bytes is 6 MB, about a millisecond, so a search waits at most that long for it.
COPY_VECTORS = 4096

# A graph is rebuilt once it has grown to this many times the size it was given room at (see
# `_make_room`: its arrays move at twice that size), leaving the adds made during the rebuild
# the rest of the room.
REGROW_AT = 1.5


@dataclass(frozen=True, slots=True)
class GraphShape:
    """How a partition's HNSW graph is built and searched (`semantic.hnsw_*`; the recall they
    give at 1M entries is measured by bench/hnsw_tuning.py)."""

    m: int  # links per node
    ef_construction: int  # candidates kept while a node is linked: the graph's quality
    ef_search: int  # candidates kept while searching: recall against search time

    @classmethod
    def of(cls, config: SemanticConfig) -> GraphShape:
        return cls(config.hnsw_m, config.hnsw_ef_construction, config.hnsw_ef_search)


@dataclass(frozen=True, slots=True)
class Copied:
    """The live vectors of an index as a rebuild read them: ids[i]'s vector is vectors[i]."""

    ids: np.ndarray  # int64
    vectors: np.ndarray  # float32, one row a vector


class VectorIndex:
    def __init__(self, dim: int, flat_max: int, graph: GraphShape) -> None:
        self._dim = dim
        self._flat_max = flat_max
        self._shape = graph
        self._lock = threading.Lock()
        self._tombstones: set[int] = set()
        self._hnsw = False
        # The graph's size past which it wants a rebuild, before its arrays run out of room.
        self._regrow_at = 0
        # Replaced whole by a rebuild, never shrunk otherwise: a caller may hold a snapshot.
        self._parts: list[faiss.Index] = []
        # Each live vector's part: the only state per vector outside FAISS, which holds the
        # vectors themselves (read back for `vector` and for rebuilds: no second copy here).
        self._part_of: dict[int, faiss.Index] = {}
        # While a rebuild runs: the ids added (True) and removed (False) since it began, in
        # order, for it to apply to the new index; None otherwise.
        self._changes: list[tuple[int, bool]] | None = None

    def __len__(self) -> int:
        return len(self._part_of)

    @property
    def is_hnsw(self) -> bool:
        return self._hnsw

    def _flat(self) -> faiss.Index:
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self._dim))

    def _graph(self) -> faiss.Index:
        graph = faiss.IndexHNSWFlat(self._dim, self._shape.m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = self._shape.ef_construction
        graph.hnsw.efSearch = self._shape.ef_search
        return faiss.IndexIDMap2(graph)

    def _part_with_room(self, parts: list[faiss.Index], hnsw: bool) -> faiss.Index:
        if hnsw:
            return parts[0]
        for part in parts:
            if part.ntotal < PART_VECTORS:
                return part
        part = self._flat()
        parts.append(part)
        return part

    def _place(
        self,
        parts: list[faiss.Index],
        part_of: dict[int, faiss.Index],
        hnsw: bool,
        vector_id: int,
        vector: Vector,
    ) -> None:
        """Add a vector to a set of parts (this index's, or a rebuild's new ones)."""
        row = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self._dim)
        part = self._part_with_room(parts, hnsw)
        part.add_with_ids(row, np.array([vector_id], dtype=np.int64))
        part_of[vector_id] = part

    @staticmethod
    def _unplace(
        part_of: dict[int, faiss.Index], tombstones: set[int], hnsw: bool, vector_id: int
    ) -> bool:
        """Remove a vector from a set of parts: for real from a flat part, as a tombstone from
        the graph; False when the parts do not hold it."""
        part = part_of.pop(vector_id, None)
        if part is None:
            return False
        if hnsw:
            tombstones.add(vector_id)
        else:
            part.remove_ids(faiss.IDSelectorBatch(np.array([vector_id], dtype=np.int64)))
        return True

    def add(self, vector_id: int, vector: Vector) -> None:
        with self._lock:
            self._place(self._parts, self._part_of, self._hnsw, vector_id, vector)
            if self._changes is not None:
                self._changes.append((vector_id, True))

    def remove(self, vector_id: int) -> bool:
        with self._lock:
            if not self._unplace(self._part_of, self._tombstones, self._hnsw, vector_id):
                return False
            if self._changes is not None:
                self._changes.append((vector_id, False))
            return True

    def vector(self, vector_id: int) -> Vector | None:
        """A copy of the vector as FAISS holds it (flat storage: exactly what was added)."""
        with self._lock:
            part = self._part_of.get(vector_id)
            # An IndexIDMap2 reconstructs by the caller's id, through its reverse map.
            return None if part is None else self._reconstruct(part, vector_id)

    def _reconstruct(self, part: faiss.Index, vector_id: int) -> Vector:
        return part.reconstruct(vector_id, np.empty(self._dim, dtype=np.float32))

    def parts(self) -> list[faiss.Index]:
        """The parts as they are now, to search one at a time with `search_part`."""
        with self._lock:
            return list(self._parts)

    def search_part(self, part: faiss.Index, vector: Vector, k: int) -> Found:
        """Up to k (id, cosine) pairs of one part, best first. A part replaced by a rebuild
        meanwhile is still searched as it was; the caller drops ids it no longer knows."""
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self._dim)
        with self._lock:
            if part.ntotal == 0:
                return []
            # Ask for more than k when tombstones may take some of the places.
            want = min(part.ntotal, k + min(len(self._tombstones), 64))
            scores, ids = part.search(query, want)
            found = [
                (int(i), float(s))
                for i, s in zip(ids[0], scores[0], strict=True)
                if i >= 0 and int(i) not in self._tombstones
            ]
        return found[:k]

    def search(self, vector: Vector, k: int) -> Found:
        """Up to k (id, cosine) pairs over every part, best first."""
        return best_of([self.search_part(part, vector, k) for part in self.parts()], k)

    def wants_rebuild(self) -> bool:
        if not self._hnsw:
            return len(self._part_of) > self._flat_max
        grown = self._parts[0].ntotal >= self._regrow_at
        return grown or len(self._tombstones) > len(self._part_of) // 4 + 16

    def rebuild(self) -> None:
        """Rebuild as flat or HNSW by size (blocking; run it in a worker thread). Searches,
        adds and removes go on meanwhile: the vectors are copied out of FAISS a piece at a time,
        the new index is built without the lock, what changed meanwhile is applied to it, also
        without the lock, until little is left, and the rest is applied as it is swapped in.
        (An addition to a graph of a million vectors costs milliseconds: the hundred that came
        in during a rebuild, applied under the lock, held searches for seconds.)"""
        with self._lock:
            self._changes = []
        try:
            copied = self._copy_live()
            hnsw = len(copied.ids) > self._flat_max
            parts, part_of = self._build(copied, hnsw)
            del copied
            regrow_at = _make_room(parts[0]) if hnsw else 0
            tombstones: set[int] = set()
            for _ in range(CATCH_UP_ROUNDS):
                with self._lock:
                    changes = self._take_changes()
                self._apply(changes, parts, part_of, tombstones, hnsw)
                if len(changes) <= SWAP_CHANGES:
                    break
            self._swap(parts, part_of, tombstones, hnsw, regrow_at)
        finally:
            with self._lock:
                self._changes = None

    def _take_changes(self) -> list[tuple[int, Vector | None]]:
        """The changes logged since the last call (lock held): an added vector read back from
        its part while it is still live, None for a removal."""
        assert self._changes is not None, "a rebuild is running"
        taken: list[tuple[int, Vector | None]] = []
        for vector_id, added in self._changes:
            if not added:
                taken.append((vector_id, None))
                continue
            part = self._part_of.get(vector_id)
            if part is not None:  # else added, then removed again: its removal follows
                taken.append((vector_id, self._reconstruct(part, vector_id)))
        self._changes = []
        return taken

    def _apply(
        self,
        changes: list[tuple[int, Vector | None]],
        parts: list[faiss.Index],
        part_of: dict[int, faiss.Index],
        tombstones: set[int],
        hnsw: bool,
    ) -> None:
        """Logged changes onto the new parts, which no other thread sees yet. An id added
        while its vectors were being copied may have been copied as well: it is not added
        twice. A removal of an id the copy never saw finds nothing to remove."""
        for vector_id, vector in changes:
            if vector is None:
                self._unplace(part_of, tombstones, hnsw, vector_id)
            elif vector_id not in part_of:
                self._place(parts, part_of, hnsw, vector_id, vector)

    def _copy_live(self) -> Copied:
        """The live vectors, read from FAISS's storage. A flat part (at most PART_VECTORS) is
        read in one hold of the lock, since a removal moves its vectors; the graph only grows
        (its removals are tombstones), so its positions stay put between holds."""
        ids: list[np.ndarray] = []
        vectors: list[np.ndarray] = []
        for part in self.parts():  # parts added meanwhile hold vectors added meanwhile
            assert isinstance(part, faiss.IndexIDMap2), "every part maps the caller's ids"
            start, graph = 0, True
            while graph:
                with self._lock:
                    graph = self._hnsw  # a flat part is read whole, in this one hold
                    stop = min(part.ntotal, start + COPY_VECTORS) if graph else part.ntotal
                    if start >= stop:
                        break
                    rows = faiss.downcast_index(part.index).reconstruct_n(start, stop - start)
                    # A view of the part's ids (not a copy of all of them for every piece).
                    held = faiss.rev_swig_ptr(part.id_map.data(), part.ntotal)[start:stop].copy()
                    live = np.fromiter(
                        (int(i) not in self._tombstones for i in held), dtype=bool, count=len(held)
                    )
                ids.append(held[live])
                vectors.append(rows[live])
                start = stop
        if not ids:
            return Copied(np.zeros(0, np.int64), np.zeros((0, self._dim), np.float32))
        return Copied(np.concatenate(ids), np.concatenate(vectors))

    def _build(
        self, copied: Copied, hnsw: bool
    ) -> tuple[list[faiss.Index], dict[int, faiss.Index]]:
        """The new parts over the copied vectors (no lock: this is the slow part)."""
        count = len(copied.ids)
        if hnsw:
            parts, bounds = [self._graph()], [(0, count)]
        else:
            bounds = [(a, min(a + PART_VECTORS, count)) for a in range(0, count, PART_VECTORS)]
            parts = [self._flat() for _ in bounds]
        part_of: dict[int, faiss.Index] = {}
        for part, (a, b) in zip(parts, bounds, strict=True):
            if b > a:
                part.add_with_ids(copied.vectors[a:b], copied.ids[a:b])
                part_of.update(dict.fromkeys(copied.ids[a:b].tolist(), part))
        return parts, part_of

    def _swap(
        self,
        parts: list[faiss.Index],
        part_of: dict[int, faiss.Index],
        tombstones: set[int],
        hnsw: bool,
        regrow_at: int,
    ) -> None:
        """Put the new parts in place with the last changes logged. The old parts are released
        after the lock: freeing a graph of a million vectors takes a while too."""
        with self._lock:
            self._apply(self._take_changes(), parts, part_of, tombstones, hnsw)
            retired = self._parts, self._part_of
            self._parts, self._part_of, self._tombstones = parts, part_of, tombstones
            self._hnsw, self._regrow_at = hnsw, regrow_at
        del retired

    def export_parts(self) -> tuple[list[np.ndarray], bool]:
        """Every part serialized (`faiss.serialize_index`), and whether it is HNSW: for a
        snapshot. Holds the lock while it copies (about 1 ms per 1,000 vectors here)."""
        with self._lock:
            return [faiss.serialize_index(part) for part in self._parts], self._hnsw

    @classmethod
    def restore(
        cls, dim: int, flat_max: int, graph: GraphShape, parts: list[faiss.IndexIDMap2]
    ) -> VectorIndex:
        """An index over deserialized parts (`IndexIDMap2`s, their ids final), built from
        nothing: restoring a 100,000-vector HNSW graph this way takes a fraction of a second,
        building it took minutes. A restored graph keeps its links; it is searched, and grows,
        with the settings of now."""
        index = cls(dim, flat_max, graph)
        for part in parts:
            inner = faiss.downcast_index(part.index)
            if isinstance(inner, faiss.IndexHNSW):
                inner.hnsw.efConstruction = graph.ef_construction
                inner.hnsw.efSearch = graph.ef_search
                index._hnsw = True
                index._regrow_at = _make_room(part)
            index._part_of.update(dict.fromkeys(faiss.vector_to_array(part.id_map).tolist(), part))
        index._parts = list(parts)
        return index


def _make_room(part: Any) -> int:
    """Let a graph just built or restored grow by half without moving its arrays; returns the
    size at which it wants a rebuild (REGROW_AT times its size now).

    FAISS keeps a graph's vectors, links, levels and ids in growable arrays (std::vector),
    the large ones sized exactly by a build or a read. The first add after that moved them all
    to a new allocation, under the index's lock and on the event loop: 1.1 s at 200,000
    vectors here, seconds at a million, during which no lookup of any partition was answered.
    This makes those moves here, in the worker thread, before anything searches the graph."""
    for array in graph_arrays(part):
        if getattr(array, "is_owned", True):  # a view over a mapped file cannot grow at all
            _move_to_double(array)
    # At least 16 more: a graph of a few vectors (tests build them) would rebuild at each add.
    return part.ntotal + max(int(part.ntotal * (REGROW_AT - 1)), 16)


def graph_arrays(part: Any) -> tuple[Any, ...]:
    """The growable arrays of a graph part (an IndexIDMap2 over an IndexHNSWFlat; FAISS's
    stubs type both as plain indexes): vectors, links, levels, link offsets, ids."""
    inner: Any = faiss.downcast_index(part.index)
    storage: Any = faiss.downcast_index(inner.storage)
    hnsw = inner.hnsw
    return storage.codes, hnsw.neighbors, hnsw.levels, hnsw.offsets, part.id_map


def _move_to_double(array: Any) -> None:
    """Grow a std::vector until it moves, then shrink it back. A vector that outgrows its
    capacity moves to one of at least twice its size, and shrinking keeps the capacity. The
    elements grown into are written (zeros), so this commits memory only up to the capacity
    the vector had already reserved (none for an exactly sized one): the room past it stays
    untouched pages until adds fill it."""
    size = array.size()
    if size == 0:
        return
    start, extra = int(array.data()), 1
    while True:
        array.resize(size + extra)
        if int(array.data()) != start:
            break
        extra *= 2
    array.resize(size)


def best_of(found: list[Found], k: int) -> Found:
    """The k best (id, cosine) pairs of several parts' results, each id once."""
    seen: set[int] = set()
    best: Found = []
    for vector_id, similarity in heapq.merge(*found, key=lambda pair: -pair[1]):
        if vector_id not in seen:
            seen.add(vector_id)
            best.append((vector_id, similarity))
            if len(best) == k:
                break
    return best
