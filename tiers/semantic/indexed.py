"""What the similarity tier keeps about each indexed entry, and what that costs in memory.

The analysis is kept as it came (the wire string of a snapshot, or the parsed `Analysis` of a
new entry) and parsed the first time a search looks at the entry: parsing costs about 18 µs an
entry here, 18 s for a 1M-entry partition restored from a snapshot, most of whose entries no
search will ever look at. Once parsed, the wire string goes (about 180 bytes an entry): a
snapshot writes it again from the parsed analysis (`Analysis.to_wire`, about 6 µs an entry).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from normalize.meaning.signature import Analysis
from tiers.base import Entry
from tiers.semantic.vector_rows import NO_ROW

# Python's share of one indexed entry beyond its vectors, and FAISS's id maps. Measured here
# with tracemalloc (2026-12-05), 20,000 MiniLM-sized entries in one partition, every analysis
# parsed: 1,702 B traced per entry, 777 of it the answer's float16 row (with the rows' room to
# grow), so about 925 B for the record (144), its parsed analysis (about 580), its id (71), its
# two map slots (about 125) and its ints; FAISS's IndexIDMap2 adds about 50 (its id array and
# reverse map) that tracemalloc does not see. An estimate for a budget, not an account.
PYTHON_BYTES_PER_ENTRY = 1_000


def entry_bytes(dim: int, hnsw_m: int) -> int:
    """The memory one indexed entry of `dim` dimensions costs, estimated: its vector in FAISS
    (the only copy: rebuilds read it back), its answer's vector as a float16 row, its HNSW
    links (2·M on the ground layer, 4-byte ids) and the Python above. 3,560 bytes at 384
    dimensions and M 32 (5,864 while a second float32 copy and a float32 answer were held)."""
    return 4 * dim + 2 * dim + 2 * hnsw_m * 4 + PYTHON_BYTES_PER_ENTRY


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
    # The prompt's analysis: its wire form until a search first needs it parsed, then parsed.
    held_analysis: Analysis | str
    # The rows of its answer's embedding (once attached; none for tool-call answers) and, in
    # two-stage mode, of its prompt's vector by the second model, in its partition's
    # `VectorRows` (tiers/semantic/holdings.py); NO_ROW: none.
    answer_row: int = NO_ROW
    rescore_row: int = NO_ROW

    @classmethod
    def of(cls, entry: Entry, vector_id: int, analysis: Analysis) -> Indexed:
        """The record of a new entry, its analysis parsed already. The strings many entries
        share (partition, tenant, namespace, model) are interned: one copy each, not one per
        entry (a partition's 53 characters are 100 bytes an entry)."""
        return cls(
            entry.entry_id,
            sys.intern(entry.partition),
            vector_id,
            entry.threshold,
            entry.learned_threshold,
            entry.expires_at,
            entry.hard_expires_at,
            sys.intern(entry.tenant),
            sys.intern(entry.namespace),
            sys.intern(entry.model),
            sys.intern(analysis.language),
            analysis,
        )

    @property
    def analysis(self) -> Analysis:
        """The prompt's analysis, parsed on first use (a snapshot's are all still wire)."""
        held = self.held_analysis
        if isinstance(held, str):
            # Checked readable when the entry was indexed or written to the snapshot.
            held = self.held_analysis = Analysis.from_wire(held)
        return held

    @property
    def wire(self) -> str:
        """The prompt's analysis in its wire form (`Analysis.to_wire`), for a snapshot."""
        held = self.held_analysis
        return held if isinstance(held, str) else held.to_wire()
