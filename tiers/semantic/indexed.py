"""What the similarity tier keeps about each indexed entry, and what that costs in memory.

The analysis is kept as it came (the wire string of a snapshot, or the parsed `Analysis` of a
new entry) and parsed the first time a search looks at the entry: parsing costs about 18 µs an
entry here, 18 s for a 1M-entry partition restored from a snapshot, most of whose entries no
search will ever look at.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normalize.meaning.signature import Analysis
from tiers.base import Entry

# Python's share of one indexed entry beyond its vectors. Measured here with tracemalloc, 20,000
# MiniLM-sized entries added and every analysis parsed: 2.07 KB traced per entry, 1.5 KB of it
# the vector's copy kept for rebuilds, so about 0.5 KB for the record, its parsed analysis and
# its dictionary slots. Rounded up to 1 KB for what tracemalloc does not see (FAISS's id maps):
# an estimate for a budget, not an account.
PYTHON_BYTES_PER_ENTRY = 1_000


def entry_bytes(dim: int, hnsw_m: int) -> int:
    """The memory one indexed entry of `dim` dimensions costs, estimated: its vector in FAISS,
    the copy kept for rebuilds, its answer's vector, its HNSW links (2·M on the ground layer,
    4-byte ids) and the Python above."""
    return 3 * 4 * dim + 2 * hnsw_m * 4 + PYTHON_BYTES_PER_ENTRY


@dataclass(slots=True)
class Indexed:
    entry_id: str
    partition: str
    vector_id: int
    threshold: float
    learned_threshold: float | None
    expires_at: float
    hard_expires_at: float
    tenant: str
    namespace: str
    model: str
    language: str
    # The answer's embedding, once attached (None until then, or for tool-call answers).
    answer: np.ndarray | None
    # The prompt's analysis, parsed (None until a search first needs it), and its wire form.
    parsed: Analysis | None
    wire: str
    # Two-stage: the prompt's vector by the second model (None: one stage, or not attached).
    rescore: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        entry: Entry,
        vector_id: int,
        analysis: Analysis,
        answer: np.ndarray | None,
        rescore: np.ndarray | None = None,
    ) -> Indexed:
        """The record of a new entry, its analysis parsed already."""
        assert entry.analysis is not None, "an indexed entry has an analysis"
        return cls(
            entry.entry_id,
            entry.partition,
            vector_id,
            entry.threshold,
            entry.learned_threshold,
            entry.expires_at,
            entry.hard_expires_at,
            entry.tenant,
            entry.namespace,
            entry.model,
            analysis.language,
            answer,
            analysis,
            entry.analysis,
            rescore,
        )

    @property
    def analysis(self) -> Analysis:
        """The prompt's analysis, parsed on first use (a snapshot's are all still wire)."""
        parsed = self.parsed
        if parsed is None:
            # Checked readable when the entry was indexed or written to the snapshot.
            parsed = self.parsed = Analysis.from_wire(self.wire)
        return parsed
