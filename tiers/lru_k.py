"""The in-process tier: entries in a dict, evicted by the LRU-K policy.

Bounded by entry count and by bytes; TTL aware (an entry is dropped once it is gone, i.e. past
TTL + grace; expired-but-in-grace entries stay so a degraded answer can use them). The policy
decides who goes; this class only stores.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from core.clock import Clock
from core.config import LruKConfig
from tiers.base import Entry, Invalidation, TierName
from tiers.policies.lru_k import LruKPolicy


class LruKTier:
    def __init__(self, config: LruKConfig, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._policy: LruKPolicy[str] = LruKPolicy(
            config.k, config.history_entries, config.correlated_reference_period_s
        )
        self._entries: dict[str, Entry] = {}
        self._ids_by_key: dict[str, str] = {}
        self._bytes = 0
        self._expiry: list[tuple[float, str]] = []  # (hard expiry, id), lazily pruned
        self.evictions = 0

    @property
    def name(self) -> TierName:
        return TierName.LRU_K

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def get_now(self, key: str) -> Entry | None:
        entry_id = self._ids_by_key.get(key)
        return None if entry_id is None else self._touch(entry_id)

    async def get(self, key: str) -> Entry | None:
        return self.get_now(key)

    async def get_by_id(self, entry_id: str) -> Entry | None:
        return self._touch(entry_id)

    def _touch(self, entry_id: str) -> Entry | None:
        entry = self._entries.get(entry_id)
        if entry is None:
            return None
        if entry.is_gone(self._clock.time()):
            self._remove(entry_id, forget=True)
            return None
        self._policy.record_access(entry_id, self._clock.monotonic())
        return entry

    async def put(self, entry: Entry) -> str | None:
        entry = _without_vectors(entry)
        previous = self._ids_by_key.get(entry.exact_key)
        if previous == entry.entry_id:
            previous = None
        if previous is not None:
            # A newer answer to the same question supersedes the old one, even one too large
            # to be held here: the old answer must not be served from here any more.
            self._remove(previous, forget=True)
        if entry.size_bytes > self._config.max_bytes:
            return previous  # could never fit; storing it would evict everything else first
        if entry.entry_id in self._entries:
            self._swap(entry)
            return previous
        self._entries[entry.entry_id] = entry
        self._index(entry)
        self._bytes += entry.size_bytes
        self._policy.admit(entry.entry_id, self._clock.monotonic())
        heapq.heappush(self._expiry, (entry.hard_expires_at, entry.entry_id))
        self._enforce_bounds(admitted=entry.entry_id)
        return previous

    async def replace(self, entry: Entry) -> bool:
        if entry.entry_id not in self._entries:
            return False
        self._swap(entry)
        return True

    async def delete(self, entry_id: str) -> bool:
        if entry_id not in self._entries:
            return False
        self._remove(entry_id, forget=True)
        return True

    async def invalidate(self, selector: Invalidation) -> int:
        doomed = [e.entry_id for e in self._entries.values() if selector.matches(e)]
        for entry_id in doomed:
            self._remove(entry_id, forget=True)
        return len(doomed)

    async def matching(self, selector: Invalidation) -> list[Entry]:
        now = self._clock.time()
        return [e for e in self._entries.values() if selector.matches(e) and not e.is_gone(now)]

    async def count(self) -> int:
        return len(self._entries)

    def _swap(self, entry: Entry) -> None:
        entry = _without_vectors(entry)
        old = self._entries[entry.entry_id]
        self._unindex(old)
        self._entries[entry.entry_id] = entry
        self._index(entry)
        self._bytes += entry.size_bytes - old.size_bytes
        if entry.hard_expires_at != old.hard_expires_at:
            heapq.heappush(self._expiry, (entry.hard_expires_at, entry.entry_id))

    def _index(self, entry: Entry) -> None:
        self._ids_by_key[entry.exact_key] = entry.entry_id
        if entry.lemma_key:
            self._ids_by_key[entry.lemma_key] = entry.entry_id

    def _unindex(self, entry: Entry) -> None:
        for key in (entry.exact_key, entry.lemma_key):
            # Another entry may have taken over a shared lemma key since.
            if key and self._ids_by_key.get(key) == entry.entry_id:
                del self._ids_by_key[key]

    def _remove(self, entry_id: str, *, forget: bool) -> None:
        entry = self._entries.pop(entry_id)
        self._unindex(entry)
        self._bytes -= entry.size_bytes
        if forget:
            self._policy.forget(entry_id)
        else:
            self._policy.evict(entry_id)

    def _enforce_bounds(self, admitted: str) -> None:
        self._drop_gone()
        cfg = self._config
        while len(self._entries) > cfg.max_entries or self._bytes > cfg.max_bytes:
            victim = self._policy.choose_victim(exclude=admitted)
            assert victim is not None, "over bounds with no victim: policy and storage disagree"
            self._remove(victim, forget=False)
            self.evictions += 1

    def _drop_gone(self) -> None:
        now = self._clock.time()
        while self._expiry and self._expiry[0][0] <= now:
            _, entry_id = heapq.heappop(self._expiry)
            entry = self._entries.get(entry_id)
            if entry is not None and entry.is_gone(now):
                self._remove(entry_id, forget=True)
        if len(self._expiry) > 4 * len(self._entries) + 64:
            self._expiry = [(e.hard_expires_at, e.entry_id) for e in self._entries.values()]
            heapq.heapify(self._expiry)


def _without_vectors(entry: Entry) -> Entry:
    """The copy to hold: a hit never needs the vectors (3 KB a semantic entry with MiniLM);
    the semantic tier keeps its own, Redis the stored ones."""
    if entry.vector is None and entry.answer_vector is None:
        return entry
    return replace(entry, vector=None, answer_vector=None)
