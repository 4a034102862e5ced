"""Storing one answer writes each tier once and tells the other replicas once: what this process
holds at once, the shared tier and the event with the answer's embedding.

The real AnswerStore, EntryBuilder and CacheService, with the seams they write to recorded: an
in-process LRU-K tier and a shared tier (standing for Redis) at the CacheTier seam, the semantic
index and the replication log. The prompt's features and the answer embedder are fakes at their
seams (unit vectors chosen by the test), so the entry is a semantic one and has an answer vector.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.clock import ManualClock
from core.config import CacheConfig, DegradeConfig, LruKConfig, TtlConfig
from core.pacing import LoopTurns
from core.recorder import CacheRecorder, NotStoredReason
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.keys.request import CacheRequest, Route
from normalize.meaning.signature import Analysis, MeaningSignature
from normalize.prompt_features import PromptAnalysis
from proxy.answering.answer_store import Answer, AnswerStore
from proxy.answering.entry_builder import EntryBuilder
from proxy.answering.store_rule import StoreRule
from tests.support.entries import TAG
from tiers.base import Entry, TierName
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import ThresholdController
from tiers.policies.ttl import TtlPolicy
from tiers.replication import EventKind, ReplicationEvent
from tiers.semantic.protocol import NullSemanticIndex
from tiers.service import CacheService

DIM = 4
REQUEST = CacheRequest(
    route=Route.CHAT,
    tenant="t",
    namespace="",
    model="m",
    partition=TAG + "p" * 48,
    exact_key=TAG + "question",
    prompt_text="How do I reset my PIN?",
    stream=False,
    include_usage=False,
)
ANSWER_TEXT = "Open the app and choose Reset PIN."
COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "created": 1,
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": ANSWER_TEXT},
            "finish_reason": "stop",
        }
    ],
}


def axis(i: int) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[i] = 1.0
    return vector


class SemanticFeatures:
    """A prompt eligible for semantic matching, its analysis and embedding given."""

    async def analysis(self) -> PromptAnalysis | None:
        analysis = Analysis(("reset", "pin"), MeaningSignature())
        return PromptAnalysis(analysis, TAG + "lemma", analysis.to_wire())

    async def vector(self) -> np.ndarray | None:
        return axis(0)

    def semantic_allowed(self) -> bool:
        return True


class GatedEmbedder:
    """The answer embedder: answers only once the test lets it, so the test sees what was
    written while the embedding was still being computed."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.asked = asyncio.Event()

    async def embed(self, text: str, language: str = "en") -> np.ndarray:
        assert text == ANSWER_TEXT
        self.asked.set()
        await self.release.wait()
        return axis(1)


class CountedMemory(LruKTier):
    """The in-process tier, counting its writes."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(LruKConfig(), clock)
        self.writes: list[Entry] = []

    async def put(self, entry: Entry) -> str | None:
        self.writes.append(entry)
        return await super().put(entry)

    async def replace(self, entry: Entry) -> bool:
        self.writes.append(entry)
        return await super().replace(entry)


@dataclass
class CountedShared:
    """The shared tier at the CacheTier seam (Redis in production): every write, in order."""

    writes: list[Entry] = field(default_factory=list)

    @property
    def name(self) -> TierName:
        return TierName.REDIS

    async def get(self, key: str) -> Entry | None:
        return None

    async def get_by_id(self, entry_id: str) -> Entry | None:
        return next((e for e in reversed(self.writes) if e.entry_id == entry_id), None)

    async def put(self, entry: Entry) -> str | None:
        self.writes.append(entry)
        return None

    async def replace(self, entry: Entry) -> bool:
        self.writes.append(entry)
        return True

    async def delete(self, entry_id: str) -> bool:
        return False

    async def invalidate(self, selector: Any) -> int:
        return 0

    async def matching(self, selector: Any) -> list[Entry]:
        return []

    async def count(self) -> int:
        return len({e.entry_id for e in self.writes})


class RecordedIndex(NullSemanticIndex):
    """The semantic-index seam: every entry added or updated."""

    def __init__(self) -> None:
        self.added: list[Entry] = []
        self.updated: list[Entry] = []

    async def add(self, entry: Entry) -> None:
        self.added.append(entry)

    async def update(self, entry: Entry) -> None:
        self.updated.append(entry)


class RecordedLog:
    """The replication seam: the events published, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[EventKind, str]] = []

    async def publish(self, event: ReplicationEvent) -> None:
        self.events.append((event.kind, event.entry_id))


class World:
    def __init__(self, max_entry_bytes: int = 1 << 20) -> None:
        clock = ManualClock()
        self.memory = CountedMemory(clock)
        self.shared = CountedShared()
        self.index = RecordedIndex()
        self.log = RecordedLog()
        self.embedder = GatedEmbedder()
        service = CacheService(
            [self.memory, self.shared], clock, CacheRecorder(), self.index, self.log
        )
        thresholds = ThresholdController(VerifyConfig(), SemanticConfig().threshold)
        entries = EntryBuilder(
            CacheConfig(max_entry_bytes=max_entry_bytes),
            DegradeConfig(),
            SemanticConfig(),
            TtlPolicy(TtlConfig()),
            thresholds,
            clock,
            self.embedder,
        )
        self.answers = AnswerStore(service, entries, StoreRule(), LoopTurns())

    def store(self, completion: dict[str, Any] = COMPLETION) -> asyncio.Task[str | None]:
        answer = Answer(TAG + "-e1", REQUEST, SemanticFeatures(), completion)
        return asyncio.get_running_loop().create_task(self.answers.store(answer))


async def test_one_answer_is_one_write_per_tier_one_index_entry_and_one_event() -> None:
    world = World()
    storing = world.store()
    await asyncio.wait_for(world.embedder.asked.wait(), 1.0)

    # While the answer is being embedded, only what this process holds has it: a client
    # repeating its question (LRU-K) or a paraphrase (the semantic index) right after is served.
    assert [e.entry_id for e in world.memory.writes] == [TAG + "-e1"]
    assert await world.memory.get(REQUEST.exact_key) is not None
    (indexed,) = world.index.added
    assert indexed.vector == axis(0).tobytes() and indexed.answer_vector is None
    assert (world.shared.writes, world.log.events) == ([], [])

    world.embedder.release.set()
    assert await asyncio.wait_for(storing, 1.0) is None

    assert len(world.memory.writes) == 1
    assert len(world.index.added) == 1
    # The index takes the answer's embedding onto the entry it holds (no second vector).
    (with_answer,) = world.index.updated
    (shared,) = world.shared.writes
    assert world.log.events == [(EventKind.ADD, TAG + "-e1")]
    # Written once, with both vectors: the other replicas load it whole on the one event.
    for entry in (shared, with_answer):
        assert entry.answer_vector == axis(1).tobytes()
        assert entry.vector == axis(0).tobytes()


async def test_an_answer_with_nothing_to_embed_is_written_once_without_an_answer_vector() -> None:
    world = World()
    tool_call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    completion = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    assert await asyncio.wait_for(world.store(completion), 1.0) is None
    assert not world.embedder.asked.is_set()
    (shared,) = world.shared.writes
    assert shared.answer_vector is None
    assert (len(world.memory.writes), len(world.index.added), world.index.updated) == (1, 1, [])
    assert world.log.events == [(EventKind.ADD, TAG + "-e1")]


async def test_a_refused_or_too_large_answer_writes_nothing() -> None:
    unfinished = {**COMPLETION, "choices": [{**COMPLETION["choices"][0], "finish_reason": None}]}
    world = World()
    assert await world.store(unfinished) == "unfinished"
    small = World(max_entry_bytes=16)
    assert await small.store() == NotStoredReason.TOO_LARGE
    for w in (world, small):
        assert (w.memory.writes, w.shared.writes, w.log.events) == ([], [], [])
