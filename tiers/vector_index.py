"""One partition's vectors in FAISS: exact (flat inner product) while small, HNSW past a size.

Vectors are L2-normalized, so inner product is cosine similarity. Ids are int64s chosen by the
caller. A flat index removes ids for real; HNSW cannot, so removed ids become tombstones that
searches skip. `wants_rebuild()` says when the index should change shape (the flat index
outgrew `flat_max`, or tombstones pass a quarter of the graph); `rebuild()` then builds the new
index from a snapshot without holding the lock (building HNSW costs about a millisecond a
vector here), and swaps it in with whatever changed meanwhile. Every other operation holds the
lock, because searches of large indexes run in a worker thread while adds and removes come
from the event loop.
"""

from __future__ import annotations

import threading

import faiss
import numpy as np

Vector = np.ndarray


class VectorIndex:
    def __init__(self, dim: int, flat_max: int, hnsw_m: int, ef_search: int) -> None:
        self._dim = dim
        self._flat_max = flat_max
        self._hnsw_m = hnsw_m
        self._ef_search = ef_search
        self._lock = threading.Lock()
        self._vectors: dict[int, Vector] = {}  # the live vectors, for rebuilds
        self._tombstones: set[int] = set()
        self._hnsw = False
        self._index = self._flat()

    def __len__(self) -> int:
        return len(self._vectors)

    @property
    def is_hnsw(self) -> bool:
        return self._hnsw

    def _flat(self) -> faiss.Index:
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self._dim))

    def _graph(self) -> faiss.Index:
        graph = faiss.IndexHNSWFlat(self._dim, self._hnsw_m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efSearch = self._ef_search
        return faiss.IndexIDMap2(graph)

    def add(self, vector_id: int, vector: Vector) -> None:
        row = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self._dim)
        with self._lock:
            self._vectors[vector_id] = row[0]
            self._index.add_with_ids(row, np.array([vector_id], dtype=np.int64))

    def remove(self, vector_id: int) -> bool:
        with self._lock:
            if self._vectors.pop(vector_id, None) is None:
                return False
            if self._hnsw:
                self._tombstones.add(vector_id)
            else:
                self._index.remove_ids(faiss.IDSelectorBatch(np.array([vector_id], dtype=np.int64)))
            return True

    def vector(self, vector_id: int) -> Vector | None:
        with self._lock:
            return self._vectors.get(vector_id)

    def search(self, vector: Vector, k: int) -> list[tuple[int, float]]:
        """Up to k (id, cosine) pairs, best first."""
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self._dim)
        with self._lock:
            live = len(self._vectors)
            if live == 0:
                return []
            # Ask for more than k when tombstones may take some of the places.
            want = min(live + len(self._tombstones), k + min(len(self._tombstones), 64))
            scores, ids = self._index.search(query, want)
            found = [
                (int(i), float(s))
                for i, s in zip(ids[0], scores[0], strict=True)
                if i >= 0 and int(i) not in self._tombstones
            ]
        return found[:k]

    def wants_rebuild(self) -> bool:
        if not self._hnsw:
            return len(self._vectors) > self._flat_max
        return len(self._tombstones) > len(self._vectors) // 4 + 16

    def rebuild(self) -> None:
        """Rebuild as flat or HNSW by size (blocking; run it in a worker thread)."""
        with self._lock:
            snapshot = dict(self._vectors)
        hnsw = len(snapshot) > self._flat_max
        index = self._graph() if hnsw else self._flat()
        if snapshot:
            ids = np.fromiter(snapshot.keys(), dtype=np.int64, count=len(snapshot))
            index.add_with_ids(np.stack(list(snapshot.values())), ids)
        with self._lock:
            added = [(i, v) for i, v in self._vectors.items() if i not in snapshot]
            for vector_id, vector in added:
                index.add_with_ids(
                    vector.reshape(1, self._dim), np.array([vector_id], dtype=np.int64)
                )
            removed = [i for i in snapshot if i not in self._vectors]
            self._tombstones = set(removed) if hnsw else set()
            if removed and not hnsw:
                index.remove_ids(faiss.IDSelectorBatch(np.array(removed, dtype=np.int64)))
            self._index = index
            self._hnsw = hnsw
