"""The pieces bench.scale measures with: a real SemanticTier filled with entries, the lookup's
request and prompt features, the process's resident memory, Redis's bytes per entry.

Entries carry one fixed analysis (the lemma analyzer runs at about 1,000 prompts a second: an
hour for a million): every entry's wire string is its own copy, parsed into its own `Analysis`
as a new entry's is, and the meaning guards still run on every candidate a search finds.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import time
from dataclasses import dataclass

import numpy as np

from core.clock import SystemClock
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.keys.request import PARTITION_TAG_CHARS, CacheRequest, Route
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.signature import Analysis, MeaningSignature
from normalize.prompt_features import PromptAnalysis
from tests.support.entries import make_entry
from tiers.base import Entry
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.snapshot import Snapshot, SnapshotStore, Written
from tiers.semantic.tier import SemanticTier
from tiers.semantic.vector_index import VectorIndex

DIM = 384
ANALYSIS = Analysis(("reset", "pin"), MeaningSignature(), words=frozenset({"reset", "pin"}))
WIRE = ANALYSIS.to_wire()
# A short answer body: Redis's bytes per entry are reported without the answer's own size.
BODY = b'{"choices":[]}'


@dataclass(frozen=True, slots=True)
class Layout:
    """N entries over `partitions` partitions: entry n in partition n % partitions."""

    entries: int
    partitions: int

    def tag(self, n: int) -> str:
        return f"{n % self.partitions:0{PARTITION_TAG_CHARS}x}"

    def partition(self, n: int) -> str:
        return self.tag(n) + "f" * 48


def entry(layout: Layout, n: int, vector: np.ndarray, answer: np.ndarray) -> Entry:
    tag = layout.tag(n)
    return make_entry(
        f"e{n}",
        entry_id=f"{tag}-e{n}",
        partition=layout.partition(n),
        exact_key=f"{tag}e{n}",
        analysis=(WIRE + " ")[:-1],  # a copy of its own, as every real entry's is
        vector=vector.tobytes(),
        answer_vector=answer.tobytes(),
        body=BODY,
        stored_at=time.time(),
        ttl_s=86_400.0,
    )


def number_of(entry_id: str) -> int:
    return int(entry_id.rsplit("-e", 1)[1])


def new_tier(config: SemanticConfig) -> SemanticTier:
    thresholds = ThresholdController(VerifyConfig(), config.threshold)
    tier = SemanticTier(config, MeaningGuard(config), thresholds, SystemClock(), CacheRecorder())
    tier.set_dimension(DIM)
    return tier


async def fill(
    tier: SemanticTier, layout: Layout, vectors: np.ndarray, answers: np.ndarray
) -> None:
    """Every entry added through `SemanticTier.add`, then every index's rebuild (flat → HNSW)
    awaited: the tier as a replica holds it once it has settled."""
    for n in range(layout.entries):
        await tier.add(entry(layout, n, vectors[n], answers[n % len(answers)]))
        if n % 5_000 == 4_999:
            await asyncio.sleep(0)  # let finished rebuilds' callbacks run
    while True:  # the rebuilds run in a thread of the tier's: polled
        if not tier._rebuilding and not any(
            isinstance(index, VectorIndex) and index.wants_rebuild()
            for index in tier._held.indexes.values()
        ):
            return
        await asyncio.sleep(0.2)


async def write_snapshot(store: SnapshotStore, tier: SemanticTier, tag: str) -> Written:
    """The partition's snapshot, as the partition loader writes it (stream id 0-0)."""
    images = await tier.images(tag)
    assert images is not None, "nothing drops the partition while it is copied"
    return store.write(Snapshot(tag, "0-0", images))


def index_of(tier: SemanticTier, partition: str) -> VectorIndex:
    index = tier._held.index((partition, "en"))
    assert isinstance(index, VectorIndex)
    return index


def nearest_number(tier: SemanticTier, partition: str, vector: np.ndarray) -> int | None:
    """The entry number of the index's top-1 for `vector` (what recall@1 compares)."""
    found = index_of(tier, partition).search(vector, 1)
    if not found:
        return None
    item = tier._held.record((partition, "en"), found[0][0])
    assert item is not None, "a vector the index found has its entry"
    return number_of(item.entry_id)


def rss_bytes() -> int:
    """This process's resident memory, after a collection and returning freed heap to the OS
    (so what a finished rebuild freed does not count)."""
    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * 4096


def request(layout: Layout, partition: str, q: int) -> CacheRequest:
    return CacheRequest(
        route=Route.CHAT,
        tenant="t",
        namespace="",
        model="m",
        partition=partition,
        exact_key=f"{partition[:PARTITION_TAG_CHARS]}q{q}",  # an exact miss: a new prompt
        prompt_text=f"query {q}",
        stream=False,
        include_usage=False,
    )


class FixedFeatures:
    """A prompt's features computed already (the embedding is not what this bench measures)."""

    def __init__(self, vector: np.ndarray) -> None:
        self._vector = vector
        self._analysis = PromptAnalysis(ANALYSIS, None, WIRE)

    async def analysis(self) -> PromptAnalysis | None:
        return self._analysis

    async def vector(self) -> np.ndarray | None:
        return self._vector

    def vector_if_ready(self) -> np.ndarray | None:
        return self._vector

    async def rescore_vector(self) -> np.ndarray | None:
        return None

    def semantic_allowed(self) -> bool:
        return True

    def skip_reason(self) -> None:
        return None


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}
