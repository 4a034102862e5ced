"""What the similarity tier holds: per (partition, language) a vector index, the records of its
entries by vector id and their answers' (and rescore) vectors as float16 rows; and every entry
by id, least recently served first.

Kept apart from the tier's searching so that what is held changes in one place: an entry at a
time (`hold`, `release`) or a partition at a time (`drop`, `install` of a snapshot, `images` to
write one). A partition's tag is the first hex digits of its hash, which entry ids and Redis keys
start with (normalize/keys/request.py).

Two maps per entry and no more, since each costs 50-100 bytes an entry: `entries` (by id, in
recency order: who goes when the entry cap is passed) and its shelf's `records` (by vector id:
what a search found). What a tag holds is found through the shelves, whose keys start with it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass

import faiss
import numpy as np

from core.clock import Clock
from normalize.keys.request import PARTITION_TAG_CHARS
from tiers.base import Invalidation, PartitionIndex
from tiers.semantic.indexed import Indexed
from tiers.semantic.snapshot import IndexImage, Restored, SideVectors
from tiers.semantic.vector_index import VectorIndex
from tiers.semantic.vector_rows import NO_ROW, VectorRows

IndexKey = tuple[str, str]  # (partition, language)
# Entries handled per event-loop turn while a whole partition is installed or copied.
ENTRIES_PER_TURN = 4096


@dataclass(slots=True)
class Shelf:
    """One (partition, language) index and what goes with its vectors."""

    index: PartitionIndex[faiss.Index]
    records: dict[int, Indexed]  # by vector id
    answers: VectorRows
    rescores: VectorRows | None  # two-stage mode only


class Holdings:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._shelves: dict[IndexKey, Shelf] = {}
        # Every entry by id, least recently served first.
        self.entries: OrderedDict[str, Indexed] = OrderedDict()
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

    def index(self, key: IndexKey) -> PartitionIndex[faiss.Index] | None:
        shelf = self._shelves.get(key)
        return None if shelf is None else shelf.index

    @property
    def indexes(self) -> dict[IndexKey, PartitionIndex[faiss.Index]]:
        """Every index, by key (a new dict: for reports and tests)."""
        return {key: shelf.index for key, shelf in self._shelves.items()}

    def open(
        self, key: IndexKey, index: PartitionIndex[faiss.Index], dim: int, rescore_dim: int
    ) -> PartitionIndex[faiss.Index]:
        """A new, empty shelf for `key` with this index; returns the index."""
        assert key not in self._shelves, f"{key} has an index already"
        rescores = VectorRows(rescore_dim) if rescore_dim else None
        self._shelves[key] = Shelf(index, {}, VectorRows(dim), rescores)
        return index

    def record(self, key: IndexKey, vector_id: int) -> Indexed | None:
        """The entry whose vector this is in `key`'s index (None: removed, or not registered
        yet)."""
        shelf = self._shelves.get(key)
        return None if shelf is None else shelf.records.get(vector_id)

    def served(self, entry_id: str) -> None:
        if entry_id in self.entries:  # (released while its search awaited the guards)
            self.entries.move_to_end(entry_id)

    def coldest(self) -> str:
        return next(iter(self.entries))

    def hold(
        self, item: Indexed, answer: np.ndarray | None, rescore: np.ndarray | None = None
    ) -> None:
        """Register an entry whose vector is in its index already, with its answer's and its
        rescore vector where it has them."""
        shelf = self._shelves[(item.partition, item.language)]
        self._register(shelf, item)
        self.attach(item, answer, rescore)

    def _register(self, shelf: Shelf, item: Indexed) -> None:
        self.changed(item.partition[:PARTITION_TAG_CHARS])
        self.entries[item.entry_id] = item
        shelf.records[item.vector_id] = item

    def attach(self, item: Indexed, answer: np.ndarray | None, rescore: np.ndarray | None) -> None:
        """Give a held entry the vectors it does not have yet (an answer's embedding arrives
        after its entry; an entry's vectors never change)."""
        shelf = self._shelf_of(item)
        if shelf is None:
            return
        if answer is not None and item.answer_row == NO_ROW:
            item.answer_row = shelf.answers.put(answer)
        if rescore is not None and shelf.rescores is not None and item.rescore_row == NO_ROW:
            item.rescore_row = shelf.rescores.put(rescore)

    def _shelf_of(self, item: Indexed) -> Shelf | None:
        """The shelf that holds `item` (None: released, or its partition dropped)."""
        shelf = self._shelves.get((item.partition, item.language))
        return shelf if shelf is not None and shelf.records.get(item.vector_id) is item else None

    def answer(self, item: Indexed) -> np.ndarray | None:
        """The entry's answer's embedding (float32), None without one or once released."""
        shelf = self._shelf_of(item)
        if shelf is None or item.answer_row == NO_ROW:
            return None
        return shelf.answers.get(item.answer_row)

    def rescore(self, item: Indexed) -> np.ndarray | None:
        """The entry's prompt vector by the second model, None without one."""
        shelf = self._shelf_of(item)
        if shelf is None or shelf.rescores is None or item.rescore_row == NO_ROW:
            return None
        return shelf.rescores.get(item.rescore_row)

    def release(self, entry_id: str) -> tuple[IndexKey, PartitionIndex[faiss.Index]] | None:
        """Forget an entry and its vectors; returns its index (None: not held, or the index
        emptied and dropped)."""
        item = self.entries.pop(entry_id, None)
        if item is None:
            return None
        self.changed(item.partition[:PARTITION_TAG_CHARS])
        key = (item.partition, item.language)
        shelf = self._shelves[key]
        if shelf.records.get(item.vector_id) is item:
            del shelf.records[item.vector_id]
            _free_rows(shelf, item)
        shelf.index.remove(item.vector_id)
        if len(shelf.index) == 0:
            del self._shelves[key]
            return None
        return key, shelf.index

    def matching(self, selector: Invalidation) -> list[str]:
        """The ids of the entries an invalidation selects."""
        return [
            item.entry_id
            for item in self.entries.values()
            if (selector.tenant is None or item.tenant == selector.tenant)
            and (selector.namespace is None or item.namespace == selector.namespace)
            and (selector.model is None or item.model == selector.model)
        ]

    def _keys_of(self, tag: str) -> list[IndexKey]:
        return [key for key in self._shelves if key[0].startswith(tag)]

    def tag_size(self, tag: str) -> int:
        return sum(len(self._shelves[key].records) for key in self._keys_of(tag))

    def partitions(self) -> int:
        return len(self._shelves)

    def drop(self, tag: str) -> int:
        """Forget every vector of a partition at once; returns how many."""
        self.changed(tag)
        dropped = 0
        for key in self._keys_of(tag):
            shelf = self._shelves.pop(key)
            for item in shelf.records.values():
                del self.entries[item.entry_id]
            dropped += len(shelf.records)
        return dropped

    async def images(
        self, tag: str, dims: dict[str, int], chunk: int = ENTRIES_PER_TURN
    ) -> list[IndexImage] | None:
        """A partition's indexes, each with a copy of its entries' list and their rows, to
        snapshot. Copied `chunk` entries at a time, the event loop serving in between: a 1M-entry
        partition's answer rows are 768 MB, about a second's copy at once. An entry removed
        before its chunk is copied is left out (its row may be another entry's by then); what
        is stored meanwhile comes after the snapshot's stream id and is replayed on load, and a
        vector without an entry is left out on restore. None: an index of the partition was
        dropped or replaced while it was copied (a part of it is no snapshot of it)."""
        copied: list[tuple[IndexKey, Shelf, IndexImage]] = []
        for key in self._keys_of(tag):
            shelf = self._shelves[key]
            if not isinstance(shelf.index, VectorIndex):
                continue
            records = list(shelf.records.values())
            kept: list[Indexed] = []
            answers = _SideCopy(shelf.answers, len(records))
            rescores = _SideCopy(shelf.rescores, len(records))
            for start in range(0, len(records), chunk):
                if self._shelves.get(key) is not shelf:
                    return None
                live = [
                    r for r in records[start : start + chunk] if shelf.records.get(r.vector_id) is r
                ]
                answers.take([r.answer_row for r in live])
                rescores.take([r.rescore_row for r in live])
                kept += live
                await asyncio.sleep(0)
            partition, language = key
            image = IndexImage(
                partition,
                language,
                dims[language],
                kept,
                answers.side(),
                rescores.side(),
                shelf.index,
            )
            copied.append((key, shelf, image))
        if any(self._shelves.get(key) is not shelf for key, shelf, _ in copied):
            return None
        return [image for _, _, image in copied]

    async def install(
        self,
        restored: Restored,
        removed: set[str],
        rescore_dim: int = 0,
        chunk: int = ENTRIES_PER_TURN,
    ) -> None:
        """A partition's index restored from a snapshot, in place of what it holds. Entries
        indexed meanwhile (by this replica, or through the stream) are carried over and win
        over their snapshot copies; entries named in `removed` (the loader's live set of those
        deleted meanwhile), those past their grace and vectors without an entry are left out.
        Entries are registered `chunk` at a time, the event loop serving lookups in between
        (until registered, a vector's search results are dropped: it has no entry). `rescore_dim`:
        the second model's width in two-stage mode (0: one stage)."""
        key, index = (restored.partition, restored.language), restored.index
        now = self._clock.time()
        for vector_id in restored.orphans:
            index.remove(vector_id)
        rescores = restored.rescores
        if rescores is None and rescore_dim:  # none of its entries had one yet
            rescores = VectorRows(rescore_dim)
        shelf = Shelf(index, {}, restored.answers, rescores)
        live = self._shelves.get(key)
        if live is not None:
            for item in live.records.values():
                vector = live.index.vector(item.vector_id)
                if vector is not None:
                    index.add(item.vector_id, vector)
                _carry(live, shelf, item)
        self._shelves[key] = shelf
        records = restored.records
        for start in range(0, len(records), chunk):
            if self._shelves.get(key) is not shelf:
                return  # dropped (or replaced) meanwhile: nothing left to register into
            for record in records[start : start + chunk]:
                gone = record.entry_id in removed or now >= record.hard_expires_at
                if gone or record.entry_id in self.entries:
                    index.remove(record.vector_id)
                    _free_rows(shelf, record)
                else:
                    self._register(shelf, record)
            await asyncio.sleep(0)


def _free_rows(shelf: Shelf, item: Indexed) -> None:
    if item.answer_row != NO_ROW:
        shelf.answers.free(item.answer_row)
        item.answer_row = NO_ROW
    if item.rescore_row != NO_ROW and shelf.rescores is not None:
        shelf.rescores.free(item.rescore_row)
        item.rescore_row = NO_ROW


def _carry(old: Shelf, new: Shelf, item: Indexed) -> None:
    """Move a held entry's record and rows from the shelf a snapshot replaces to the new one."""
    new.records[item.vector_id] = item
    if item.answer_row != NO_ROW:
        item.answer_row = new.answers.put(old.answers.get(item.answer_row))
    if item.rescore_row != NO_ROW:
        if old.rescores is not None and new.rescores is not None:
            item.rescore_row = new.rescores.put(old.rescores.get(item.rescore_row))
        else:
            item.rescore_row = NO_ROW


class _SideCopy:
    """The rows of a partition's entries, copied chunk by chunk in their order, as a snapshot
    writes them (zeros, and not present, where an entry has none)."""

    def __init__(self, rows: VectorRows | None, count: int) -> None:
        self._rows = rows
        width = 0 if rows is None else rows.dim
        # Room for every entry; pages are only touched as rows are copied in.
        self._vectors = np.zeros((count, width), dtype=np.float16)
        self._present = np.zeros(count, dtype=bool)
        self._filled = 0

    def take(self, picked: list[int]) -> None:
        at = slice(self._filled, self._filled + len(picked))
        if self._rows is not None:
            self._vectors[at] = self._rows.gather(picked)
            self._present[at] = np.asarray(picked, dtype=np.int64) != NO_ROW
        self._filled += len(picked)

    def side(self) -> SideVectors:
        return SideVectors(self._vectors[: self._filled], self._present[: self._filled])
