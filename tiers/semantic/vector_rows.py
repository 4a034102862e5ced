"""Vectors kept beside a partition's index (answers' embeddings, two-stage rescore vectors) as
float16 rows of one array, by row number, instead of a float32 numpy object per entry: 768
bytes a 384-wide vector instead of about 1,680 (1,536 of data, the bytes object holding them and
the array around it).

What float16 costs in a cosine. float16 keeps 11 significant bits: a component a_i is stored as
a_i(1 + e_i) with |e_i| ≤ u = 2^-11 ≈ 4.9e-4 (round to nearest), or, below float16's smallest
normal number (2^-14), with an absolute error of at most η = 2^-25. For unit vectors a, b of d
dimensions the stored cosine then differs from the true one by at most

    Σ |a_i b_i| (2u + u²) + η (‖a‖₁ + ‖b‖₁)(1 + u) + d η²  ≤  2u + u² + 2η√d (1 + u) + d η²

(Cauchy-Schwarz: Σ|a_i b_i| ≤ 1 and ‖a‖₁ ≤ √d), 9.78e-4 at d = 384; each dot product is also
computed in float32, which adds at most about d·2^-24 (2.3e-5) to each side. `cosine_error_bound`
gives the sum: 1.02e-3 at d = 384. That is the worst case, every rounding in one direction; the
roundings of real vectors are independent, about u·√(2/d) ≈ 3.5e-5.

Where it is used: two answers agree when their cosine, on the common scale, reaches
`verify.answer_agreement` (0.85). The common scale multiplies a model's cosine by
(1 − reference) / (1 − its threshold): 1 for MiniLM, 10 for Chinese e5 (threshold 0.985), so a
decision can change only for two answers within 1.0e-3 (MiniLM) or 1.0e-2 (e5) of that level,
against the 0.10 answer margin within which a neighbour's answer is compared at all and the
0.0025 steps e5's threshold was calibrated in (on its own scale, where the bound is 1.0e-3).
A rescore vector's cosine decides a candidate within `semantic.rescore_band` under its
threshold; the bound is the same there.

A removed entry's row goes on a free list for the next. The rows live in blocks that are never
copied: when all are full a new block is added, a quarter of the rows held so far (at least 8),
so room stays within a quarter of what is used, as a single array grown by a quarter would. A
single array had to be copied whole to grow: 768 MB at 1M rows, 0.4 s measured here, on the
event loop, at the first store into a partition restored from a snapshot (sized exactly) and
again at each quarter's growth. A new block costs nothing until written (numpy's zeros come from
calloc: pages the kernel zeroes on first touch). Everything goes with its partition's index.
Used from the event loop only (a snapshot takes a copy of its rows there).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

HALF_UNIT_ROUNDOFF = 2.0**-11  # float16: 11 significant bits, rounding to nearest
HALF_SUBNORMAL_ERROR = 2.0**-25  # half the spacing of float16's subnormal numbers
SINGLE_UNIT_ROUNDOFF = 2.0**-24  # float32, for the dot products themselves
NO_ROW = -1


def cosine_error_bound(dim: int) -> float:
    """How far the cosine of two unit vectors of `dim` dimensions, stored as float16 rows and
    computed in float32, can be from the cosine of the float32 vectors (module docstring)."""
    u, eta = HALF_UNIT_ROUNDOFF, HALF_SUBNORMAL_ERROR
    storage = 2 * u + u * u + 2 * eta * math.sqrt(dim) * (1 + u) + dim * eta * eta
    return storage + 2 * dim * SINGLE_UNIT_ROUNDOFF


class VectorRows:
    """Vectors of one width; `put` returns the row that `get` reads back (as float32)."""

    def __init__(self, dim: int, rows: np.ndarray | None = None) -> None:
        """Empty, or holding `rows` (rows 0..n-1 in use, kept as they are: one block)."""
        self._dim = dim
        self._blocks: list[np.ndarray] = []
        self._starts: list[int] = []  # each block's first row
        self._capacity = 0  # rows in all blocks
        if rows is not None and len(rows):
            self._add_block(np.ascontiguousarray(rows, dtype=np.float16).reshape(len(rows), dim))
        self._used = self._capacity  # rows below this were handed out
        self._free: list[int] = []

    @property
    def dim(self) -> int:
        return self._dim

    def __len__(self) -> int:
        """How many rows are in use."""
        return self._used - len(self._free)

    @property
    def nbytes(self) -> int:
        return sum(block.nbytes for block in self._blocks)

    def put(self, vector: np.ndarray) -> int:
        assert vector.shape == (self._dim,), f"a row is {self._dim} wide, not {vector.shape}"
        if self._free:
            row = self._free.pop()
        else:
            if self._used == self._capacity:
                # A quarter, not as much again: a doubling would leave half the room empty,
                # 384 bytes an entry of nothing at 384 dimensions. From 8 rows, not more: most
                # partitions are small (1,000 of 10 entries each would otherwise hold mostly
                # room).
                rows = max(8, self._capacity // 4)
                self._add_block(np.zeros((rows, self._dim), dtype=np.float16))
            row = self._used
            self._used += 1
        block, offset = self._locate(row)
        block[offset] = vector  # numpy rounds to the nearest float16
        return row

    def _add_block(self, block: np.ndarray) -> None:
        self._blocks.append(block)
        self._starts.append(self._capacity)
        self._capacity += len(block)

    def _locate(self, row: int) -> tuple[np.ndarray, int]:
        """The block holding `row`, and the row's place in it."""
        at = bisect.bisect_right(self._starts, row) - 1
        return self._blocks[at], row - self._starts[at]

    def get(self, row: int) -> np.ndarray:
        """The row as float32 (a copy): float16 dot products would round their sum to 11 bits."""
        assert 0 <= row < self._used, f"row {row} was never handed out"
        block, offset = self._locate(row)
        return block[offset].astype(np.float32)

    def free(self, row: int) -> None:
        assert 0 <= row < self._used, f"row {row} was never handed out"
        self._free.append(row)

    def gather(self, rows: list[int]) -> np.ndarray:
        """A float16 copy of `rows`, in that order; zeros where a row is NO_ROW."""
        picked = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.zeros((len(picked), self._dim), dtype=np.float16)
        # Per block, one gather of the rows it holds (np.take copies whole rows; a per-row loop
        # costs microseconds a row, seconds for a large partition's snapshot).
        at = np.searchsorted(np.asarray(self._starts, dtype=np.int64), picked, side="right") - 1
        held = picked >= 0
        for n, block in enumerate(self._blocks):
            mine = np.flatnonzero(held & (at == n))
            if len(mine):
                out[mine] = np.take(block, picked[mine] - self._starts[n], axis=0)
        return out
