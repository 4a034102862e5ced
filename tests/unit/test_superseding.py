"""A newer answer to the same question retires the old entry everywhere.

The cache service over two real LRU-K tiers (standing for "in process" and "shared"), with the
two seams it talks to beside them recorded: the semantic index and the replication log. When
an entry is stored under an exact key another entry held (a `Cache-Control: no-cache` refresh,
warm-up, a verified answer), the old one must not stay servable anywhere: not by id from a
tier, not as a semantic candidate, and not from another replica's local copy, which only a
published deletion reaches.
"""

from __future__ import annotations

from core.clock import ManualClock
from core.config import LruKConfig
from core.recorder import CacheRecorder
from normalize.keys.request import CacheRequest, Route
from normalize.prompt_features import NoFeatures
from tests.support.entries import TAG, make_entry
from tiers.base import Entry
from tiers.lru_k import LruKTier
from tiers.replication import EventKind, ReplicationEvent
from tiers.semantic.protocol import NullSemanticIndex
from tiers.service import CacheService

KEY = TAG + "question"
REQUEST = CacheRequest(
    route=Route.CHAT,
    tenant="t",
    namespace="",
    model="m",
    partition=TAG + "p" * 48,
    exact_key=KEY,
    prompt_text=None,
    stream=False,
    include_usage=False,
)


class RecordedIndex(NullSemanticIndex):
    """The semantic-index seam: which entries it holds."""

    def __init__(self) -> None:
        self.held: set[str] = set()

    async def add(self, entry: Entry) -> None:
        self.held.add(entry.entry_id)

    async def remove(self, entry_id: str) -> bool:
        had = entry_id in self.held
        self.held.discard(entry_id)
        return had


class RecordedLog:
    """The replication seam: the events published, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[EventKind, str]] = []

    async def publish(self, event: ReplicationEvent) -> None:
        self.events.append((event.kind, event.entry_id))


class World:
    def __init__(self) -> None:
        clock = ManualClock()
        self.memory = LruKTier(LruKConfig(), clock)
        self.shared = LruKTier(LruKConfig(), clock)
        self.index = RecordedIndex()
        self.log = RecordedLog()
        self.service = CacheService(
            [self.memory, self.shared], clock, CacheRecorder(), self.index, self.log
        )
        self.now = clock.time()

    def entry(self, name: str, exact_key: str = KEY, lemma_key: str | None = None) -> Entry:
        return make_entry(name, exact_key=exact_key, lemma_key=lemma_key, stored_at=self.now)


async def test_a_newer_answer_retires_the_old_entry_in_every_tier_index_and_replica() -> None:
    world = World()
    old, new = world.entry("old"), world.entry("new")
    await world.service.store(old)
    await world.service.store(new)

    for tier in (world.memory, world.shared):
        assert await tier.get_by_id(old.entry_id) is None
        assert await tier.get(KEY) == new
    assert world.index.held == {new.entry_id}
    assert world.log.events == [
        (EventKind.ADD, old.entry_id),
        (EventKind.ADD, new.entry_id),
        (EventKind.DELETE, old.entry_id),  # other replicas drop their local copies
    ]
    outcome = await world.service.lookup(REQUEST, NoFeatures())
    assert outcome.hit is not None and outcome.hit.entry == new


async def test_an_old_entry_only_a_lower_tier_still_held_is_retired_too() -> None:
    # Another replica refreshed the question: this replica's memory never saw the old entry.
    world = World()
    old, new = world.entry("old"), world.entry("new")
    await world.shared.put(old)
    await world.service.store(new)
    assert await world.shared.get_by_id(old.entry_id) is None
    assert world.log.events[-1] == (EventKind.DELETE, old.entry_id)


async def test_storing_an_entry_again_or_one_sharing_only_a_lemma_key_retires_nothing() -> None:
    world = World()
    first = world.entry("first", lemma_key=TAG + "lemma")
    other = world.entry("other", exact_key=TAG + "other question", lemma_key=TAG + "lemma")
    await world.service.store(first)
    await world.service.store(first)
    await world.service.store(other)
    assert all(kind is EventKind.ADD for kind, _ in world.log.events)
    assert world.index.held == {first.entry_id, other.entry_id}
    assert await world.shared.get_by_id(first.entry_id) == first
