"""A partition copied for its snapshot a chunk of entries at a time, the event loop serving in
between (tiers/semantic/holdings.py, `Holdings.images`): what changes meanwhile cannot give a
copied entry another entry's answer vector. Real FAISS, a manual clock."""

from __future__ import annotations

import asyncio

import numpy as np

from core.clock import ManualClock
from core.semantic_config import SemanticConfig
from normalize.meaning.signature import Analysis, MeaningSignature
from tests.support.entries import TAG, make_entry
from tiers.semantic.holdings import Holdings
from tiers.semantic.indexed import Indexed
from tiers.semantic.vector_index import GraphShape, VectorIndex

DIM = 8
PARTITION = TAG + "p" * 48
ANALYSIS = Analysis(("reset", "pin"), MeaningSignature(), words=frozenset({"reset", "pin"}))


def axis(n: int) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[n] = 1.0
    return vector


def holding(count: int) -> tuple[Holdings, VectorIndex, list[Indexed]]:
    """A partition of `count` entries, entry n's answer vector axis n."""
    held = Holdings(ManualClock(1_700_001_010.0))
    index = VectorIndex(DIM, 1_000, GraphShape.of(SemanticConfig()))
    held.open((PARTITION, "en"), index, DIM, 0)
    return held, index, [hold(held, index, n, answer=n) for n in range(count)]


def hold(held: Holdings, index: VectorIndex, n: int, answer: int) -> Indexed:
    """Entry n, its vector axis n, its answer's vector axis `answer`."""
    item = Indexed.of(make_entry(f"e{n}"), held.reserve_ids(1), ANALYSIS)
    index.add(item.vector_id, axis(n))
    held.hold(item, axis(answer))
    return item


async def test_an_entry_released_while_its_partition_is_copied_is_left_out() -> None:
    held, index, items = holding(4)
    copying = asyncio.create_task(held.images(TAG, {"en": DIM}, chunk=2))
    await asyncio.sleep(0)  # the first chunk, entries 0 and 1, is copied
    # Before the second chunk: entry 2 goes, and a new entry takes its answer's row.
    held.release(items[2].entry_id)
    hold(held, index, 5, answer=7)
    images = await copying
    assert images is not None
    (image,) = images

    assert [r.entry_id for r in image.records] == [items[n].entry_id for n in (0, 1, 3)]
    assert image.answers.present.tolist() == [True, True, True]
    expected = np.stack([axis(n) for n in (0, 1, 3)]).astype(np.float16)
    assert np.array_equal(image.answers.vectors, expected)
    assert image.rescores.vectors.shape == (3, 0)  # one stage: no rescore vectors


async def test_a_partition_dropped_while_it_is_copied_gives_no_snapshot() -> None:
    # Part of a partition written as its snapshot would, once restored, lack the rest for good:
    # the stream replays only what came after the snapshot's id.
    held, _, _ = holding(4)
    copying = asyncio.create_task(held.images(TAG, {"en": DIM}, chunk=2))
    await asyncio.sleep(0)
    assert held.drop(TAG) == 4
    assert await copying is None
