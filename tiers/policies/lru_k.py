"""LRU-K replacement policy (O'Neil, O'Neil and Weikum, 1993), apart from any storage.

The victim is the resident key whose K-th most recent access is oldest (largest backward
K-distance). Keys seen fewer than K times have an infinite distance and go first, oldest last
access first (the subsidiary LRU policy). Access history outlives eviction for up to
`history_capacity` keys (the "retained information"), so a key that comes back soon after
eviction is not treated as new. Accesses within `correlated_period_s` of the previous one count
as one (the "correlated reference period"): a burst of retries is not popularity.

The policy never sees values or time sources: callers pass `now`.

    cold: OrderedDict  resident keys with < K accesses, by last access   (victims first)
    hot:  heap         (K-th most recent access as of its push, seq, key), one item per key

An access only appends to the key's history: it moves the key's K-th most recent access later,
never earlier, so the time in the key's heap item stays a lower bound of the true one. Choosing
a victim pops the top; if its time is out of date it goes back with the true time, otherwise it
is the true minimum. A hit therefore costs O(1), and the heap work is paid only on eviction.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict, deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class LruKPolicy(Generic[K]):
    def __init__(
        self, k: int = 2, history_capacity: int = 10_000, correlated_period_s: float = 0.0
    ):
        assert k >= 1, f"K must be at least 1, got {k}"
        self._k = k
        self._history_capacity = history_capacity
        self._correlated_s = correlated_period_s
        self._history: dict[K, deque[float]] = {}  # resident keys: their last K access times
        self._retained: OrderedDict[K, deque[float]] = OrderedDict()  # evicted keys' history
        self._cold: OrderedDict[K, None] = OrderedDict()
        self._hot: list[tuple[float, int, K]] = []
        self._queued: set[K] = set()  # keys with an item in the heap
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._history)

    def __contains__(self, key: object) -> bool:
        return key in self._history

    def admit(self, key: K, now: float) -> None:
        """`key` became resident (its first access, or its return after eviction)."""
        if key in self._history:
            self.record_access(key, now)
            return
        times = self._retained.pop(key, None) or deque(maxlen=self._k)
        self._history[key] = times
        self._append(key, times, now)

    def record_access(self, key: K, now: float) -> None:
        times = self._history.get(key)
        assert times is not None, f"access recorded for a key that is not resident: {key!r}"
        self._append(key, times, now)

    def _append(self, key: K, times: deque[float], now: float) -> None:
        if times and now - times[-1] < self._correlated_s:
            # A correlated access: refresh the last time, do not count a new access.
            times[-1] = now
        else:
            times.append(now)
        if len(times) < self._k:
            self._cold[key] = None
            self._cold.move_to_end(key)
            return
        if self._cold:
            self._cold.pop(key, None)
        if key not in self._queued:
            self._queued.add(key)
            heapq.heappush(self._hot, (times[0], next(self._seq), key))
            if len(self._hot) > 2 * len(self._history) + 64:
                self._compact()

    def backward_k_distance(self, key: K, now: float) -> float:
        times = self._history[key]
        return now - times[0] if len(times) == self._k else float("inf")

    def choose_victim(self, exclude: K | None = None) -> K | None:
        """The key to evict next (still resident until `evict` is called), or None if empty.
        `exclude` is never chosen: the key being admitted right now is not a candidate, as in
        LRU-K's buffer replacement, where the victim is chosen among the pages already there."""
        # The cold queue is in LRU order; at most its first item is skipped.
        for key in self._cold:
            if key != exclude:
                return key
        skipped: list[tuple[float, int, K]] = []
        victim: K | None = None
        while self._hot:
            kth_time, _, key = self._hot[0]
            times = self._history.get(key)
            if times is None or len(times) != self._k:
                heapq.heappop(self._hot)  # the key left
                self._queued.discard(key)
                continue
            if times[0] != kth_time:  # accessed since it was pushed: back in, at its true time
                heapq.heapreplace(self._hot, (times[0], next(self._seq), key))
                continue
            if key == exclude:
                skipped.append(heapq.heappop(self._hot))
                continue
            victim = key
            break
        for item in skipped:
            heapq.heappush(self._hot, item)
        return victim

    def evict(self, key: K) -> None:
        """`key` left the cache under pressure: keep its history for a while."""
        times = self._history.pop(key, None)
        self._cold.pop(key, None)
        if times is None or self._history_capacity == 0:
            return
        self._retained[key] = times
        self._retained.move_to_end(key)
        while len(self._retained) > self._history_capacity:
            self._retained.popitem(last=False)

    def forget(self, key: K) -> None:
        """`key` was deleted on purpose (invalidation, expiry): drop its history too."""
        self._history.pop(key, None)
        self._cold.pop(key, None)
        self._retained.pop(key, None)

    def _compact(self) -> None:
        # Items of keys that left are dropped lazily; rebuild when they dominate, so memory
        # stays bounded.
        live = [
            (times[0], next(self._seq), key)
            for key, times in self._history.items()
            if len(times) == self._k
        ]
        heapq.heapify(live)
        self._hot = live
        self._queued = {key for _, _, key in live}
