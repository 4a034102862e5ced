"""What the similarity tier holds: one vector index per (partition, language), a record per
indexed entry, and the ways to find them (by vector id, by partition tag, by recency).

Kept apart from the tier's searching so that what is held changes in one place: an entry at a
time (`hold`, `release`) or a partition at a time (`drop`, `install` of a snapshot, `images` to
write one). A partition's tag is the first hex digits of its hash, which entry ids and Redis keys
start with (normalize/keys/request.py).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import faiss

from core.clock import Clock
from normalize.keys.request import PARTITION_TAG_CHARS
from tiers.base import Invalidation, PartitionIndex
from tiers.semantic.indexed import Indexed
from tiers.semantic.snapshot import IndexImage, Restored
from tiers.semantic.vector_index import VectorIndex

IndexKey = tuple[str, str]  # (partition, language)


class Holdings:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.indexes: dict[IndexKey, PartitionIndex[faiss.Index]] = {}
        self.entries: dict[str, Indexed] = {}
        self.by_vector: dict[int, str] = {}
        # Least recently served first: who goes when the entry cap is passed.
        self.recency: OrderedDict[str, None] = OrderedDict()
        self._by_tag: dict[str, set[str]] = {}
        # Per partition tag, a count of the changes to what it holds (an entry in or out, or
        # changed): equal counts, equal contents, so an unchanged snapshot need not be written.
        self._versions: dict[str, int] = {}
        self._next_id = 1

    def reserve_ids(self, count: int) -> int:
        """The first of `count` fresh vector ids (unique across partitions)."""
        first = self._next_id
        self._next_id += count
        return first

    def version(self, tag: str) -> int:
        return self._versions.get(tag, 0)

    def changed(self, tag: str) -> None:
        self._versions[tag] = self._versions.get(tag, 0) + 1

    def hold(self, item: Indexed) -> None:
        """Register an entry whose vector is in its index already."""
        self.changed(item.partition[:PARTITION_TAG_CHARS])
        self.entries[item.entry_id] = item
        self.by_vector[item.vector_id] = item.entry_id
        self.recency[item.entry_id] = None
        self._by_tag.setdefault(item.partition[:PARTITION_TAG_CHARS], set()).add(item.entry_id)

    def release(self, entry_id: str) -> tuple[IndexKey, PartitionIndex[faiss.Index]] | None:
        """Forget an entry and its vector; returns its index (None: not held, or the index
        emptied and dropped)."""
        item = self.entries.pop(entry_id, None)
        if item is None:
            return None
        self.recency.pop(entry_id, None)
        self.by_vector.pop(item.vector_id, None)
        tag = item.partition[:PARTITION_TAG_CHARS]
        self.changed(tag)
        held = self._by_tag[tag]
        held.discard(entry_id)
        if not held:
            del self._by_tag[tag]
        key = (item.partition, item.language)
        index = self.indexes[key]
        index.remove(item.vector_id)
        if len(index) == 0:
            del self.indexes[key]
            return None
        return key, index

    def matching(self, selector: Invalidation) -> list[str]:
        """The ids of the entries an invalidation selects."""
        return [
            item.entry_id
            for item in self.entries.values()
            if (selector.tenant is None or item.tenant == selector.tenant)
            and (selector.namespace is None or item.namespace == selector.namespace)
            and (selector.model is None or item.model == selector.model)
        ]

    def tag_size(self, tag: str) -> int:
        return len(self._by_tag.get(tag, ()))

    def drop(self, tag: str) -> int:
        """Forget every vector of a partition at once; returns how many."""
        doomed = self._by_tag.pop(tag, set())
        self.changed(tag)
        for entry_id in doomed:
            item = self.entries.pop(entry_id)
            self.by_vector.pop(item.vector_id, None)
            self.recency.pop(entry_id, None)
        for key in [key for key in self.indexes if key[0].startswith(tag)]:
            del self.indexes[key]
        return len(doomed)

    def images(self, tag: str, dims: dict[str, int]) -> list[IndexImage]:
        """A partition's indexes, each with a copy of its entries' list, to snapshot."""
        records: dict[IndexKey, list[Indexed]] = {}
        for entry_id in self._by_tag.get(tag, ()):
            item = self.entries[entry_id]
            records.setdefault((item.partition, item.language), []).append(item)
        return [
            IndexImage(partition, language, dims[language], items, index)
            for (partition, language), items in records.items()
            if isinstance(index := self.indexes.get((partition, language)), VectorIndex)
        ]

    async def install(self, restored: Restored, removed: set[str], chunk: int = 4096) -> None:
        """A partition's index restored from a snapshot, in place of what it holds. Entries
        indexed meanwhile (by this replica, or through the stream) are carried over and win
        over their snapshot copies; entries named in `removed` (the loader's live set of those
        deleted meanwhile), those past their grace and vectors without an entry are left out.
        Entries are registered `chunk` at a time, the event loop serving lookups in between
        (until registered, a vector's search results are dropped: it has no entry)."""
        key, index = (restored.partition, restored.language), restored.index
        now = self._clock.time()
        for vector_id in restored.orphans:
            index.remove(vector_id)
        live = self.indexes.get(key)
        if live is not None:
            tag = restored.partition[:PARTITION_TAG_CHARS]
            held = [self.entries[e] for e in self._by_tag.get(tag, ())]
            for item in [i for i in held if (i.partition, i.language) == key]:
                vector = live.vector(item.vector_id)
                if vector is not None:
                    index.add(item.vector_id, vector)
        self.indexes[key] = index
        records = restored.records
        for start in range(0, len(records), chunk):
            for record in records[start : start + chunk]:
                gone = record.entry_id in removed or now >= record.hard_expires_at
                if gone or record.entry_id in self.entries:
                    index.remove(record.vector_id)
                else:
                    self.hold(record)
            await asyncio.sleep(0)
