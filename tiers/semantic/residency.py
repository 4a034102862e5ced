"""Which partitions a replica holds in its semantic index, and which goes when memory runs out.

A partition is not held until a lookup or a store asks about it; it is then loading (in the
background) and, once loaded, held: the replication stream keeps it current. Past the memory
budget the coldest held partitions (the least recently asked about) are dropped, never one still
loading and never the one just asked about; a dropped partition loads again when next asked.

The policy sees partition tags, sizes in bytes and the order of use, never vectors or Redis.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from enum import StrEnum


class PartitionState(StrEnum):
    LOADING = "loading"
    HELD = "held"


class PartitionResidency:
    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        # Least recently asked about first.
        self._states: OrderedDict[str, PartitionState] = OrderedDict()

    def state(self, tag: str) -> PartitionState | None:
        return self._states.get(tag)

    def holds(self, tag: str) -> bool:
        """Held or loading: the stream's events for it are applied."""
        return tag in self._states

    def touch(self, tag: str) -> bool:
        """The partition was asked about: now the most recently used. True when it was not held
        (it is loading from now on, and the caller starts the load)."""
        if tag in self._states:
            self._states.move_to_end(tag)
            return False
        self._states[tag] = PartitionState.LOADING
        return True

    def loaded(self, tag: str) -> None:
        if tag in self._states:
            self._states[tag] = PartitionState.HELD

    def forget(self, tag: str) -> None:
        """Dropped, or its load failed: asked about again, it loads again."""
        self._states.pop(tag, None)

    def loading(self) -> list[str]:
        return [tag for tag, state in self._states.items() if state is PartitionState.LOADING]

    def held(self) -> list[str]:
        return [tag for tag, state in self._states.items() if state is PartitionState.HELD]

    def victims(self, sizes: Mapping[str, int], keep: str | None = None) -> list[str]:
        """The held partitions to drop, coldest first, until the rest fit the budget:
        `sizes` is each held or loading partition's bytes; `keep` is never chosen."""
        total = sum(sizes.values())
        chosen = []
        for tag, state in self._states.items():
            if total <= self._max_bytes:
                break
            if state is PartitionState.HELD and tag != keep:
                chosen.append(tag)
                total -= sizes.get(tag, 0)
        return chosen
