"""Data for `bench.quality`: the labelled dev files, and caches of embeddings and parses.

Embedding ~100k texts takes minutes on two cores and parsing them about as long, so both are
computed once and kept under `bench/results/cache/` (git-ignored): embeddings as one float32
matrix per model, parses as spaCy `DocBin`s per dataset. A cache is keyed by the texts it holds,
so a changed data file or model only recomputes what is new. Analyses are always recomputed from
the cached parses, so a change to the signature or the guards never needs a re-parse.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
# Our own hand-written sets (shipped with the bench only): everyday chatbot questions.
OWN_DATA_DIR = Path(__file__).resolve().parent / "data"
CACHE_DIR = Path(__file__).resolve().parent / "results" / "cache"

# everyday-en: paraphrases users type to a chatbot, and traps (negation, numbers with units,
# entities, swapped roles, antonyms, another kind of question), each pair with its `kind`.
OWN_PAIR_SETS = ("everyday-en",)
PAIR_SETS = ("qqp", "paws-wiki", "mrpc", *OWN_PAIR_SETS)
WORKLOADS = ("banking77", "clinc150")


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    label: int
    kind: str = ""  # own sets: "paraphrase", or the trap's kind ("negation", "role", …)


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    group: str


def load_pairs(name: str, data_dir: Path = DATA_DIR) -> list[Pair]:
    if name in OWN_PAIR_SETS:
        rows = _read_jsonl(OWN_DATA_DIR / f"{name}.jsonl")
    else:
        rows = _read_jsonl(data_dir / f"{name}.dev.jsonl")
    return [Pair(str(r["a"]), str(r["b"]), int(r["label"]), str(r.get("kind", ""))) for r in rows]


def load_workload(name: str, data_dir: Path = DATA_DIR) -> list[Prompt]:
    rows = _read_jsonl(data_dir / f"{name}.dev.jsonl")
    return [Prompt(str(r["prompt"]), str(r["group"])) for r in rows]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def text_id(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


class EmbeddingCache:
    """A text → vector store on disk, filled in chunks so an interrupted run keeps its work."""

    def __init__(self, name: str, cache_dir: Path = CACHE_DIR) -> None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        self._ids_path = cache_dir / f"{name}.ids.json"
        self._vec_path = cache_dir / f"{name}.f32.npy"
        self._ids: list[str] = []
        self._vectors: npt.NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        if self._ids_path.exists() and self._vec_path.exists():
            self._ids = json.loads(self._ids_path.read_text())
            self._vectors = np.load(self._vec_path)
        self._row = {tid: i for i, tid in enumerate(self._ids)}

    def vectors(
        self,
        texts: Sequence[str],
        encode: Callable[[Sequence[str]], npt.NDArray[np.float32]],
        chunk: int = 2048,
    ) -> npt.NDArray[np.float32]:
        """Vectors of `texts` in order, encoding (and saving) only the ones not cached yet."""
        missing = sorted({t for t in texts if text_id(t) not in self._row})
        started = time.perf_counter()
        for start in range(0, len(missing), chunk):
            part = missing[start : start + chunk]
            self._append(part, encode(part))
            done = start + len(part)
            rate = done / max(time.perf_counter() - started, 1e-9)
            print(f"  embedded {done}/{len(missing)} new texts ({rate:.0f}/s)", flush=True)
        return self._vectors[[self._row[text_id(t)] for t in texts]]

    def _append(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        ids = [text_id(t) for t in texts]
        if self._vectors.size == 0:
            self._vectors = vectors.astype(np.float32)
        else:
            self._vectors = np.concatenate([self._vectors, vectors.astype(np.float32)])
        for tid in ids:
            self._row[tid] = len(self._ids)
            self._ids.append(tid)
        np.save(self._vec_path, self._vectors)
        self._ids_path.write_text(json.dumps(self._ids))


class ParseCache:
    """Parsed docs of one dataset, kept as a spaCy `DocBin` (parser and NER output included).

    The cache only grows: a request for texts it lacks parses those and saves the union.
    """

    def __init__(self, name: str, model_name: str, cache_dir: Path = CACHE_DIR) -> None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        self._path = cache_dir / f"{name}.{model_name}.spacy"
        self._ids_path = cache_dir / f"{name}.{model_name}.ids.json"

    def docs(
        self, texts: Iterable[str], vocab: Vocab, parse: Callable[[Iterable[str]], Iterable[Doc]]
    ) -> Iterator[tuple[str, Doc]]:
        """(text, doc) for each distinct text in `texts`, in no particular order."""
        wanted = {text_id(t): t for t in texts}
        cached_ids: list[str] = []
        docbin = DocBin(store_user_data=False)
        if self._ids_path.exists():
            cached_ids = json.loads(self._ids_path.read_text())
            docbin = DocBin(store_user_data=False).from_bytes(self._path.read_bytes())
            for tid, doc in zip(cached_ids, docbin.get_docs(vocab), strict=True):
                if tid in wanted:
                    yield wanted[tid], doc
        missing = sorted(set(wanted) - set(cached_ids))
        if not missing:
            return
        started = time.perf_counter()
        for i, doc in enumerate(parse(wanted[tid] for tid in missing), 1):
            docbin.add(doc)
            yield wanted[missing[i - 1]], doc
            if i % 5000 == 0:
                rate = i / (time.perf_counter() - started)
                print(f"  parsed {i}/{len(missing)} ({rate:.0f}/s)", flush=True)
        self._path.write_bytes(docbin.to_bytes())
        self._ids_path.write_text(json.dumps(cached_ids + missing))
