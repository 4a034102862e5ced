"""A partition's vector indexes on local disk, with the replication stream id they are current
to: what lets a restarted replica serve a large partition again without building its HNSW graph
(about 14 minutes for 1M vectors here; reading it back takes seconds).

One file per partition tag, `{directory}/{tag}.npz` (numpy's zip of arrays, read without
pickle), written to a temporary name and renamed, so a reader sees a whole snapshot or the one
before. A partition unchanged since its snapshot is not written again: `{tag}.stream` (small,
renamed into place too) says that the snapshot with a given content id is current to a later
stream id. For each (partition, language) index it holds the serialized FAISS parts
(`faiss.serialize_index`) and, per entry, its vector id, thresholds, expiry times, answer vector
(and rescore vector, in two-stage mode) and the wire form of its analysis. Format 3 stores the
answer and rescore vectors as float16, as the tier holds them (tiers/semantic/vector_rows.py);
format 2, which stored them as float32, is still read (rounded to float16 on reading).

A snapshot is fuzzy: it notes the stream id first, then copies the indexes and then the entries,
while the replica goes on changing them. What changed after that stream id is replayed from the
stream when the snapshot is loaded (tiers/partition_loader.py), which is why a vector without
its entry, or an entry without its vector, is dropped on load rather than trusted.

Reading runs in two steps, in worker threads: `read` (the file and the FAISS parts), then
`restore` with the fresh vector ids the tier reserved for it on the event loop: ids are the
tier's own and unique across partitions, and the snapshot's were another process's.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import faiss
import numpy as np

from core.errors import SnapshotUnreadable
from core.semantic_config import SemanticConfig
from tiers.semantic.indexed import Indexed
from tiers.semantic.vector_index import GraphShape, VectorIndex
from tiers.semantic.vector_rows import NO_ROW, VectorRows

FORMAT_VERSION = 3
READABLE_VERSIONS = (2, 3)


@dataclass(frozen=True, slots=True)
class SideVectors:
    """One vector per record, in the records' order (float16; zeros where it has none)."""

    vectors: np.ndarray
    present: np.ndarray  # bool, per record


@dataclass(frozen=True, slots=True)
class IndexImage:
    """One (partition, language) index: to write, the live index and a copy of its entries'
    list; once read, its parts deserialized and its entries with the snapshot's vector ids."""

    partition: str
    language: str
    dim: int
    records: list[Indexed]
    answers: SideVectors
    rescores: SideVectors
    index: VectorIndex | None = None  # to write
    parts: tuple[faiss.IndexIDMap2, ...] = ()  # once read

    def vectors(self) -> int:
        """How many vectors its parts hold (ids to reserve for `restore`)."""
        return sum(part.ntotal for part in self.parts)


@dataclass(frozen=True, slots=True)
class Snapshot:
    tag: str
    stream_id: str
    images: list[IndexImage]


@dataclass(frozen=True, slots=True)
class Written:
    size_bytes: int
    content: str  # the snapshot's content id, for `restamp`


@dataclass(frozen=True, slots=True)
class Restored:
    """An image restored with fresh vector ids, its records' rows in `answers` and
    `rescores` (None: no rescore vectors); `orphans` are vectors without an entry."""

    partition: str
    language: str
    index: VectorIndex
    records: list[Indexed]
    orphans: list[int]
    answers: VectorRows
    rescores: VectorRows | None


class SnapshotStore:
    def __init__(self, directory: str, config: SemanticConfig) -> None:
        self._dir = Path(directory)
        self._config = config

    def path(self, tag: str) -> Path:
        return self._dir / f"{tag}.npz"

    def _models(self) -> dict[str, str]:
        """The models whose vectors a snapshot holds: another model's vectors of the same
        width (MiniLM and e5-small are both 384 wide) are not comparable."""
        return {"model": self._config.model, "rescore_model": self._config.rescore_model}

    def write(self, snapshot: Snapshot) -> Written:
        """Write (blocking; in a worker thread)."""
        arrays: dict[str, np.ndarray] = {}
        heads = []
        for n, image in enumerate(snapshot.images):
            assert image.index is not None, "an image to write carries its live index"
            parts, _hnsw = image.index.export_parts()
            for k, part in enumerate(parts):
                arrays[f"i{n}_part{k}"] = part
            heads.append(_columns(image, n, arrays) | {"parts": len(parts)})
        content = os.urandom(8).hex()
        head = {
            "version": FORMAT_VERSION,
            "content": content,
            "stream_id": snapshot.stream_id,
            "models": self._models(),
            "images": heads,
        }
        arrays["head"] = np.frombuffer(json.dumps(head).encode(), dtype=np.uint8)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._replace(self.path(snapshot.tag), lambda file: np.savez(file, **arrays))  # type: ignore[arg-type]
        self._stamp(snapshot.tag).unlink(missing_ok=True)
        return Written(self.path(snapshot.tag).stat().st_size, content)

    def restamp(self, tag: str, content: str, stream_id: str) -> None:
        """Note that the snapshot `content` is current to `stream_id` (the partition did not
        change since it was written)."""
        stamp = json.dumps({"content": content, "stream_id": stream_id}).encode()
        self._replace(self._stamp(tag), lambda file: file.write(stamp))

    def _stamp(self, tag: str) -> Path:
        return self._dir / f"{tag}.stream"

    def _replace(self, path: Path, write: Callable[[BinaryIO], object]) -> None:
        """`path` written whole under a temporary name, then renamed into place."""
        self._dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self._dir, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as file:
                write(file)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _restamped(self, tag: str, content: str, stream_id: str) -> str:
        """The later stream id the snapshot `content` is current to, if one was noted."""
        try:
            stamp = json.loads(self._stamp(tag).read_bytes())
        except (OSError, ValueError):
            return stream_id  # none, or unreadable: the snapshot's own id holds anyway
        if isinstance(stamp, dict) and stamp.get("content") == content:
            return str(stamp.get("stream_id", stream_id))
        return stream_id

    def read(self, tag: str) -> Snapshot | None:
        """The partition's snapshot (blocking; in a worker thread), None when there is none;
        `SnapshotUnreadable` when the file is damaged or of another format."""
        path = self.path(tag)
        if not path.exists():
            return None
        try:
            # Opened here, not by np.load, which leaves a file it cannot read open.
            with path.open("rb") as file, np.load(file, allow_pickle=False) as data:
                head = json.loads(bytes(data["head"]))
                if head.get("version") not in READABLE_VERSIONS:
                    raise SnapshotUnreadable(f"{path}: format {head.get('version')}")
                if head.get("models") != self._models():
                    raise SnapshotUnreadable(f"{path}: written with models {head.get('models')}")
                images = [_image(data, n, h) for n, h in enumerate(head["images"])]
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, zipfile.BadZipFile) as exc:
            raise SnapshotUnreadable(f"{path}: {exc!r}") from exc
        stream_id = self._restamped(tag, str(head.get("content")), str(head["stream_id"]))
        return Snapshot(tag, stream_id, images)

    def newest(self) -> list[tuple[str, int]]:
        """(tag, file size in bytes) of every snapshot, the most recently written first."""
        if not self._dir.is_dir():
            return []
        files = [(path.stat(), path.stem) for path in self._dir.glob("*.npz")]
        return [(tag, st.st_size) for st, tag in sorted(files, key=lambda f: -f[0].st_mtime)]

    def discard(self, tag: str) -> None:
        self.path(tag).unlink(missing_ok=True)
        self._stamp(tag).unlink(missing_ok=True)

    def restore(self, image: IndexImage, first_id: int) -> Restored:
        """The image with ids `first_id`, `first_id + 1`, ... in place of the snapshot's
        (blocking; in a worker thread)."""
        old = np.concatenate(
            [faiss.vector_to_array(part.id_map) for part in image.parts] or [np.zeros(0, np.int64)]
        )
        order = np.argsort(old, kind="stable")
        sorted_old = old[order]
        new = np.arange(first_id, first_id + len(old), dtype=np.int64)

        def renamed(ids: np.ndarray) -> np.ndarray:
            return new[order[np.searchsorted(sorted_old, ids)]]

        for part in image.parts:
            faiss.copy_array_to_vector(renamed(faiss.vector_to_array(part.id_map)), part.id_map)
            part.construct_rev_map()
        cfg = self._config
        index = VectorIndex.restore(
            image.dim, cfg.flat_max_entries, GraphShape.of(cfg), list(image.parts)
        )
        if not len(old):
            answers, _ = _rows(image.answers, [])
            rescores, _ = _rows(image.rescores, [])
            return Restored(
                image.partition, image.language, index, [], [], answers, _used(rescores)
            )
        wanted = np.array([r.vector_id for r in image.records], dtype=np.int64)
        at = np.minimum(np.searchsorted(sorted_old, wanted), len(old) - 1)
        found = sorted_old[at] == wanted
        records, positions = [], []
        for position, (record, present, new_id) in enumerate(
            zip(image.records, found.tolist(), new[order[at]].tolist(), strict=True)
        ):
            if present:  # else its vector came after the parts were copied: it is replayed
                record.vector_id = new_id
                records.append(record)
                positions.append(position)
        answers, answer_rows = _rows(image.answers, positions)
        rescores, rescore_rows = _rows(image.rescores, positions)
        for record, answer_row, rescore_row in zip(records, answer_rows, rescore_rows, strict=True):
            record.answer_row, record.rescore_row = answer_row, rescore_row
        kept = {r.vector_id for r in records}
        orphans = [i for i in new.tolist() if i not in kept]
        return Restored(
            image.partition, image.language, index, records, orphans, answers, _used(rescores)
        )


def _used(rows: VectorRows) -> VectorRows | None:
    """None for the rescore rows of a one-stage snapshot (no width)."""
    return rows if rows.dim else None


def _rows(side: SideVectors, positions: list[int]) -> tuple[VectorRows, list[int]]:
    """The side vectors of the records at `positions`, those that have one, as rows; and each
    such record's row (NO_ROW: none)."""
    picked = np.asarray(positions, dtype=np.int64)
    present = side.present[picked]
    rows = np.full(len(picked), NO_ROW, dtype=np.int64)
    rows[present] = np.arange(int(present.sum()))
    return VectorRows(side.vectors.shape[1], side.vectors[picked[present]]), rows.tolist()


def _columns(image: IndexImage, n: int, arrays: dict[str, np.ndarray]) -> dict[str, object]:
    """The entries' columns as arrays (into `arrays`); returns the image's head."""
    records = image.records
    arrays[f"i{n}_ids"] = np.array([r.vector_id for r in records], dtype=np.int64)
    arrays[f"i{n}_times"] = np.array(
        [
            (
                r.threshold,
                np.nan if r.learned_threshold is None else r.learned_threshold,
                r.expires_at,
                r.hard_expires_at,
            )
            for r in records
        ],
        dtype=np.float64,
    ).reshape(len(records), 4)
    arrays[f"i{n}_answers"], arrays[f"i{n}_has_answer"] = (
        image.answers.vectors,
        image.answers.present,
    )
    # Two-stage mode: the prompts' vectors by the second model, where attached.
    arrays[f"i{n}_rescores"] = image.rescores.vectors
    arrays[f"i{n}_has_rescore"] = image.rescores.present
    for name in _STRINGS:
        arrays[f"i{n}_{name}"], arrays[f"i{n}_{name}_ends"] = _packed(
            [getattr(r, name) for r in records]
        )
    return {"partition": image.partition, "language": image.language, "dim": image.dim}


# The entries' strings, each column one UTF-8 blob and the offsets where its strings end: not
# JSON, whose decoding of a large partition's strings is one call that holds the GIL (0.64 s
# for 100,000 entries here), which would stall the event loop while a snapshot is read.
_STRINGS = ("entry_id", "tenant", "namespace", "model", "wire")


def _packed(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [text.encode() for text in strings]
    ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ends


def _unpacked(blob: np.ndarray, ends: np.ndarray) -> list[str]:
    data, bounds = blob.tobytes(), [0, *ends.tolist()]
    return [data[a:b].decode() for a, b in itertools.pairwise(bounds)]


def _image(data: np.lib.npyio.NpzFile, n: int, head: dict[str, Any]) -> IndexImage:
    parts = []
    for k in range(int(head["parts"])):
        part = faiss.deserialize_index(data[f"i{n}_part{k}"])
        if not isinstance(part, faiss.IndexIDMap2):
            raise SnapshotUnreadable(f"image {n} part {k} is a {type(part).__name__}")
        parts.append(part)
    ids, times = data[f"i{n}_ids"].tolist(), data[f"i{n}_times"].tolist()
    # Format 2's float32 vectors are rounded here to the float16 the tier holds.
    # (np.asarray: format 3's float16 arrays are taken as they are read, not copied.)
    answers = SideVectors(
        np.asarray(data[f"i{n}_answers"], dtype=np.float16),
        np.asarray(data[f"i{n}_has_answer"], dtype=bool),
    )
    rescores = SideVectors(
        np.asarray(data[f"i{n}_rescores"], dtype=np.float16),
        np.asarray(data[f"i{n}_has_rescore"], dtype=bool),
    )
    partition, language = sys.intern(str(head["partition"])), sys.intern(str(head["language"]))
    columns = [_unpacked(data[f"i{n}_{name}"], data[f"i{n}_{name}_ends"]) for name in _STRINGS]
    sides = [answers.vectors, answers.present, rescores.vectors, rescores.present]
    if not all(len(column) == len(ids) for column in [times, *sides, *columns]):
        raise SnapshotUnreadable(f"image {n}: columns of different lengths")
    if answers.vectors.shape[1] != int(head["dim"]):
        raise SnapshotUnreadable(f"image {n}: answers {answers.vectors.shape[1]} wide")
    records = [
        Indexed(
            entry_id,
            partition,
            vector_id,
            threshold,
            None if learned != learned else learned,  # NaN: none learned
            expires_at,
            hard_expires_at,
            # Few distinct values, one copy each (as `Indexed.of` does).
            sys.intern(tenant),
            sys.intern(namespace),
            sys.intern(model),
            language,
            wire,
        )
        for entry_id, tenant, namespace, model, wire, vector_id, (
            threshold,
            learned,
            expires_at,
            hard_expires_at,
        ) in zip(*columns, ids, times, strict=True)
    ]
    return IndexImage(
        partition, language, int(head["dim"]), records, answers, rescores, parts=tuple(parts)
    )
