"""The semantic tier's graph rebuilds: one that ends with another due starts it at once.

A rebuild applies what changed while it ran; those removals can pass the new graph's quarter of
tombstones, and those additions its room (tiers/semantic/vector_index.py, `_make_room`). The
tier used to look for a due rebuild only after an add or a remove, so a partition that nothing
was stored to afterwards kept a graph that wanted one. Real FAISS and a real tier; the rebuild's
build step waits for the test (a timing seam in the worker thread), so that the removals land
while it runs.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from core.clock import ManualClock
from core.semantic_config import SemanticConfig
from normalize.meaning.signature import Analysis, MeaningSignature
from tests.support.entries import TAG, make_entry
from tests.support.semantic_tier import semantic_tier
from tests.support.waiting import wait_until
from tiers.base import Entry
from tiers.semantic.vector_index import VectorIndex

DIM = 16
PARTITION = TAG + "p" * 48
ANALYSIS = Analysis(("reset", "pin"), MeaningSignature(), words=frozenset({"reset", "pin"}))
# Entries from tests.support.entries are stored at 1_700_001_000 for 300 s.
NOW_S = 1_700_001_010.0


def entries(count: int) -> list[Entry]:
    vectors = np.random.default_rng(3).standard_normal((count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        make_entry(
            f"e{n}", partition=PARTITION, analysis=ANALYSIS.to_wire(), vector=vector.tobytes()
        )
        for n, vector in enumerate(vectors)
    ]


async def test_a_rebuild_that_leaves_another_due_starts_it_without_waiting_for_a_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = SemanticConfig(flat_max_entries=50, hnsw_m=16, hnsw_ef_search=64)
    tier = semantic_tier(config, ManualClock(wall_start_s=NOW_S), DIM)
    held = entries(200)
    try:
        for entry in held:
            await tier.add(entry)
        await wait_until(
            lambda: not tier._rebuilding and tier._held.index((PARTITION, "en")).is_hnsw, 30
        )
        index = tier._held.index((PARTITION, "en"))
        assert isinstance(index, VectorIndex) and not index.wants_rebuild()

        building, go = threading.Event(), threading.Event()
        build = VectorIndex._build

        def paused_build(self: VectorIndex, *args: object) -> object:
            building.set()
            assert go.wait(30), "the test never let the build go on"
            return build(self, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(VectorIndex, "_build", paused_build)
        for entry in held[:70]:  # past a quarter of 200 (and 16): a rebuild from 130
            await tier.remove(entry.entry_id)
        assert tier._rebuilding
        await asyncio.to_thread(building.wait, 30)
        for entry in held[70:120]:  # meanwhile: 50 tombstones in a new graph of 80
            await tier.remove(entry.entry_id)
        go.set()
        # The first rebuild ends wanting a second, which runs with nothing stored meanwhile.
        await wait_until(lambda: not tier._rebuilding and not index.wants_rebuild(), 30)
        assert index.is_hnsw and len(index) == 80 and not index._tombstones
        for entry in held[120:125]:
            assert entry.vector is not None
            (candidate,) = await tier.search(
                PARTITION, np.frombuffer(entry.vector, np.float32), ANALYSIS
            )
            assert candidate.entry_id == entry.entry_id
    finally:
        go.set()
        await tier.close()
