"""Counts over the last few minutes, for the health signals that a lifetime counter cannot give.

Prometheus computes rates from counters, but a dashboard without PromQL at hand (Grafana's stat
panel over one scrape, the admin API, an alert that must not depend on the scrape interval)
wants "the hit ratio over the last 5 minutes" as a number. The window is a ring of fixed slots
(`slot_s` each, `span_s` in all): adding is a dict increment in the current slot, reading sums
the slots a window covers, so a window is exact to one slot's width and memory is bounded by
slots × distinct keys (callers keep keys few: outcome names, a partition's hash prefix).

    slots:  [t-90s..t-80s] ... [t-20s..t-10s] [t-10s..now]   ← `add` counts here
    totals(60):                 ^^^^^^^^^^^^^^^^^^^^^^^^^^   the last 6 slots
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

from core.clock import Clock

K = TypeVar("K", bound=Hashable)


class SlidingWindow(Generic[K]):
    """Counts by key over the last `span_s` seconds, in slots of `slot_s`."""

    def __init__(self, clock: Clock, span_s: float = 900.0, slot_s: float = 10.0) -> None:
        assert slot_s > 0 and span_s >= slot_s, f"a window of {span_s} s in slots of {slot_s} s"
        self._clock = clock
        self._slot_s = slot_s
        self._max_slots = math.ceil(span_s / slot_s)
        # (slot number, counts), oldest first; a slot with nothing added is simply absent.
        self._slots: deque[tuple[int, Counter[K]]] = deque()

    def add(self, key: K, n: int = 1) -> None:
        slot = self._slot_now()
        if not self._slots or self._slots[-1][0] != slot:
            self._slots.append((slot, Counter()))
            self._forget_before(slot)
        self._slots[-1][1][key] += n

    def totals(self, window_s: float) -> Mapping[K, int]:
        """The counts of the last `window_s` seconds (rounded up to whole slots), the current,
        partly filled slot included."""
        now = self._slot_now()
        self._forget_before(now)
        first = now - max(1, math.ceil(window_s / self._slot_s)) + 1
        total: Counter[K] = Counter()
        for slot, counts in reversed(self._slots):
            if slot < first:
                break
            total.update(counts)
        return total

    def _slot_now(self) -> int:
        return int(self._clock.monotonic() // self._slot_s)

    def _forget_before(self, now: int) -> None:
        oldest = now - self._max_slots + 1
        while self._slots and self._slots[0][0] < oldest:
            self._slots.popleft()


def entropy_bits(counts: Mapping[K, int]) -> float:
    """Shannon entropy of the distribution `counts` describe, in bits (0 for none or one key)."""
    total = sum(counts.values())
    if total <= 0:
        return 0.0
    bits = -sum((n / total) * math.log2(n / total) for n in counts.values() if n > 0)
    return max(0.0, bits)  # -0.0 for a single key
