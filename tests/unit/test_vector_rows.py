"""VectorRows: float16 rows by row number, and the cosine error bound they are used under.

The bound (tiers/semantic/vector_rows.py) is checked with vectors built so that every component
rounds the same way by about half a float16 step, the case it is derived for, not with random
vectors, whose errors mostly cancel; and through the tier, with two answers placed just past
the bound on either side of the agreement level.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from core.semantic_config import VerifyConfig
from tests.contract.test_semantic_index import (
    ANALYSIS,
    DIM,
    P1,
    QUERY,
    A,
    B,
    add_all,
    build_tier,
    found,
)
from tiers.semantic.vector_rows import NO_ROW, VectorRows, cosine_error_bound


def rounding_down(dim: int, seed: int, fraction: float = 0.4) -> np.ndarray:
    """A unit float32 vector each of whose components but its largest lies `fraction` of a
    float16 step above a float16 value, so that float16 rounds them all down (towards zero) by
    nearly as much as it can; the largest makes the length 1."""
    vector = np.random.default_rng(seed).standard_normal(dim)
    vector /= np.linalg.norm(vector)
    slack = int(np.argmax(np.abs(vector)))
    magnitude = np.abs(vector)
    low = magnitude.astype(np.float16)
    low = np.where(low > magnitude, np.nextafter(low, np.float16(0)), low)
    step = np.nextafter(low, np.float16(1)).astype(np.float64) - low
    vector = np.sign(vector) * (low + fraction * step)
    vector[slack] = 0.0
    vector[slack] = math.sqrt(1.0 - float(np.dot(vector, vector)))
    return vector.astype(np.float32)


def rounded_down_steps(vector: np.ndarray) -> np.ndarray:
    """How far below each component float16 rounds it, in float16 steps."""
    magnitude = np.abs(vector).astype(np.float64)
    low = np.abs(vector).astype(np.float16)
    step = np.nextafter(low, np.float16(1)).astype(np.float64) - low
    return (magnitude - low) / step


def test_the_bound_holds_where_every_rounding_goes_one_way() -> None:
    dim = 384
    rows = VectorRows(dim)
    for seed in range(5):
        vector = rounding_down(dim, seed)
        steps = rounded_down_steps(vector)
        assert np.sum((steps > 0.35) & (steps < 0.45)) == dim - 1, "all but one round down"
        held = rows.get(rows.put(vector))
        error = abs(float(np.dot(held, held)) - float(np.dot(vector, vector)))
        assert error <= cosine_error_bound(dim)
        # Not a loose bound: this case comes within a factor of 4 of it.
        assert error > cosine_error_bound(dim) / 4


def test_the_bound_at_384_dimensions_is_about_one_thousandth() -> None:
    # 2u + u² + 2η√d(1 + u) + dη² + 2d·2^-24 with u = 2^-11, η = 2^-25, d = 384.
    assert cosine_error_bound(384) == pytest.approx(1.0238e-3, rel=1e-3)


def test_rows_are_read_back_as_float16_holds_them() -> None:
    rows = VectorRows(DIM)
    vector = np.linspace(-0.7, 0.7, DIM).astype(np.float32)
    held = rows.get(rows.put(vector))
    assert held.dtype == np.float32
    assert np.array_equal(held, vector.astype(np.float16).astype(np.float32))


def test_freed_rows_are_reused_and_growth_keeps_every_row() -> None:
    rows = VectorRows(DIM)
    vectors = {n: np.full(DIM, n / 64, dtype=np.float32) for n in range(30)}
    at = {n: rows.put(vector) for n, vector in vectors.items()}
    assert sorted(at.values()) == list(range(30)) and len(rows) == 30
    for n in (3, 17, 29):
        rows.free(at.pop(n))
    assert len(rows) == 27
    again = {rows.put(np.full(DIM, -1.0, dtype=np.float32)) for _ in range(3)}
    assert again == {3, 17, 29} and len(rows) == 30
    for n, row in at.items():
        assert np.array_equal(rows.get(row), vectors[n])
    gathered = rows.gather([at[1], NO_ROW, at[2]])
    assert gathered.dtype == np.float16
    assert np.array_equal(gathered[1], np.zeros(DIM)) and gathered[2][0] == np.float16(2 / 64)
    assert np.array_equal(VectorRows(DIM).gather([NO_ROW, NO_ROW]), np.zeros((2, DIM)))


@pytest.mark.parametrize(("side", "contradicted"), [(+1, False), (-1, True)])
async def test_answers_just_past_the_bound_decide_as_their_float32_cosines_do(
    side: int, contradicted: bool
) -> None:
    # a (0.97) and b (0.95) ask the same question within the answer margin; their answers'
    # cosine sits just past the bound above (they agree) or under (they do not) the level.
    level = VerifyConfig().answer_agreement
    cosine = level + side * 1.01 * cosine_error_bound(DIM)
    first = rounding_down(DIM, seed=7)
    other = np.random.default_rng(8).standard_normal(DIM)
    other -= np.dot(other, first) * first
    other /= np.linalg.norm(other)
    second = (cosine * first + math.sqrt(1 - cosine**2) * other).astype(np.float32)
    assert (float(np.dot(first, second)) >= level) is not contradicted
    tier = build_tier("flat")
    try:
        await add_all(
            tier,
            replace(A, answer_vector=first.tobytes()),
            replace(B, answer_vector=second.tobytes()),
        )
        assert await tier.contradicts(P1, QUERY, ANALYSIS, A.entry_id) is contradicted
        assert await found(tier) == ([] if contradicted else [("a", 0.97)])
    finally:
        await tier.close()


def test_growth_never_copies_the_rows_held() -> None:
    # A restored partition's rows come as one exactly-sized array; a single array would be
    # copied whole at the first put (768 MB at 1M rows, on the event loop).
    restored = np.arange(10 * DIM, dtype=np.float16).reshape(10, DIM) / 64
    rows = VectorRows(DIM, restored)
    block = rows._blocks[0]
    added = {rows.put(np.full(DIM, n / 8, dtype=np.float32)): n for n in range(100)}
    assert np.shares_memory(block, rows._blocks[0]) and len(rows._blocks) > 2
    assert sorted(added) == list(range(10, 110)) and len(rows) == 110
    for row, n in added.items():
        assert np.array_equal(rows.get(row), np.full(DIM, n / 8, dtype=np.float32))
    # Room stays within a quarter of what is held (from 8 rows), as before.
    assert rows.nbytes <= max(8, 110 // 4) * DIM * 2 + 110 * DIM * 2
    picked = [109, 3, NO_ROW, 10, 57]
    gathered = rows.gather(picked)
    assert np.array_equal(gathered[1], restored[3]) and np.array_equal(gathered[2], np.zeros(DIM))
    for at, row in enumerate(picked):
        if row != NO_ROW:
            assert np.array_equal(gathered[at].astype(np.float32), rows.get(row))
