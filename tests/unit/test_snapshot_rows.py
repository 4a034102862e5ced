"""A snapshot installed over a partition the tier already holds: every entry keeps its own answer
vector, whether it came from the snapshot's rows or was carried over from the rows it replaces.

Real FAISS and a real snapshot file in a temporary folder; the tiers of
tests/contract/test_semantic_index.py (8 dimensions, flat).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from tests.contract.test_semantic_index import (
    ANALYSIS,
    DIM,
    P1,
    QUERY,
    A,
    B,
    C,
    add_all,
    axis,
    build_tier,
    found,
)
from tiers.semantic.snapshot import Snapshot, SnapshotStore
from tiers.semantic.tier import SemanticTier


def answer(n: int) -> np.ndarray:
    """A unit answer vector of its own (for n < 8), exact in float16: 0.5 on four axes."""
    return (0.5 * sum(axis((n + k) % DIM) for k in range(4))).astype(np.float32)


def held(tier: SemanticTier, entry_id: str) -> np.ndarray:
    vector = tier.answer_vector(entry_id)
    assert vector is not None, f"{entry_id} has no answer vector"
    return vector


async def test_an_installed_snapshot_keeps_every_entry_s_own_answer(tmp_path: Path) -> None:
    tag = A.entry_id.split("-", 1)[0]
    old = build_tier("flat")
    new = build_tier("flat")
    try:
        # The snapshot: a and b with answers 1 and 2, c without one.
        await add_all(
            old,
            replace(A, answer_vector=answer(1).tobytes()),
            replace(B, answer_vector=answer(2).tobytes()),
            C,
        )
        store = SnapshotStore(str(tmp_path), old._config)
        images = await old.images(tag)
        assert images is not None
        store.write(Snapshot(tag, "0-0", images))
        snapshot = store.read(tag)
        assert snapshot is not None and len(snapshot.images) == 1
        # Meanwhile the replica indexed b anew (answer 5) and c (answer 6): they win.
        await add_all(
            new,
            replace(B, answer_vector=answer(5).tobytes()),
            replace(C, answer_vector=answer(6).tobytes()),
        )
        (image,) = snapshot.images
        await new.install(store.restore(image, new.reserve_ids(image.vectors())), set())
        assert new.size() == 3
        expected = {A.entry_id: answer(1), B.entry_id: answer(5), C.entry_id: answer(6)}
        for entry_id, vector in expected.items():
            assert np.array_equal(held(new, entry_id), vector), entry_id
        # The answer check reads those rows: b's answer (5) contradicts a's (1).
        assert await found(new) == []
        assert await new.contradicts(P1, QUERY, ANALYSIS, A.entry_id)
        # Removing one frees its row for the next entry without touching the others'.
        assert await new.remove(B.entry_id)
        await add_all(new, replace(B, entry_id=B.entry_id + "x", answer_vector=answer(7).tobytes()))
        for entry_id in (A.entry_id, C.entry_id):
            assert np.array_equal(held(new, entry_id), expected[entry_id])
        assert np.array_equal(held(new, B.entry_id + "x"), answer(7))
    finally:
        await old.close()
        await new.close()
