"""Learning from misses, end to end below the HTTP layer: a near-miss's fresh answer, stored
through the answer store, moves its neighbour's learned threshold; a later paraphrase at that
similarity hits through it, marked learned; verifications of such hits feed their own estimate.

A real CacheService over a real LRU-K tier and a real (flat) semantic tier with hand-made unit
vectors in 8 dimensions; the answer embedder says what the test chose; the verifier asks a fake
model at the upstream client's transport seam (tests/support/fake_upstream.py), which answers
"Answer to: <question>". Threshold 0.9, learn_distance 0.05, learn_step 0.01 unless changed.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
import pytest

from core.clock import ManualClock
from core.config import CacheConfig, DegradeConfig, LruKConfig, TtlConfig, UpstreamConfig
from core.pacing import LoopTurns
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from fallback.breaker import AlwaysClosedBreaker
from normalize.keys.request import CacheRequest, Route
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.signature import Analysis, MeaningSignature
from normalize.prompt_features import PromptAnalysis, SemanticSkip
from proxy.answering.admission import AdmissionControl
from proxy.answering.answer_store import Answer, AnswerStore
from proxy.answering.entry_builder import EntryBuilder
from proxy.answering.gate import UpstreamGate
from proxy.answering.miss_learning import MissLearner
from proxy.answering.store_rule import StoreRule
from proxy.answering.verifier import Verifier
from proxy.upstream.client import UpstreamClient, UpstreamRequest
from tests.support.entries import TAG, make_entry
from tests.support.fake_upstream import FakeModel, FakeTransport
from tiers.base import Entry
from tiers.lookup_outcome import LookupOutcome
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import HitSwitch, ThresholdController
from tiers.policies.ttl import TtlPolicy
from tiers.semantic.tier import SemanticTier
from tiers.service import CacheService

DIM = 8
PARTITION = TAG + "p" * 48
QUESTION = "How can I reset my PIN?"
ANALYSIS = Analysis(("reset", "pin"), MeaningSignature(), words=frozenset({"reset", "pin"}))


def axis(n: int) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[n] = 1.0
    return vector


def at(cosine: float, own_axis: int) -> np.ndarray:
    """A unit vector at `cosine` from the neighbour's prompt (axis 1), off along its own axis:
    two of them are at the product of their cosines from each other (far under 0.9)."""
    return (cosine * axis(1) + math.sqrt(1.0 - cosine**2) * axis(own_axis)).astype(np.float32)


NEIGHBOUR_ANSWER = axis(6)  # the neighbour's answer embedding
AGREEING, DISAGREEING = axis(6), axis(7)


def request(name: str) -> CacheRequest:
    return CacheRequest(Route.CHAT, "t", "", "m", PARTITION, TAG + name, QUESTION, False, False)


def completion(text: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": text}
    return {
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


class Prompt:
    """A prompt the semantic tier looks at, at a chosen vector (no lemma key)."""

    def __init__(self, vector: np.ndarray) -> None:
        self._vector = vector

    async def analysis(self) -> PromptAnalysis | None:
        return PromptAnalysis(ANALYSIS, None, ANALYSIS.to_wire())

    async def vector(self) -> np.ndarray | None:
        return self._vector

    def vector_if_ready(self) -> np.ndarray | None:
        return self._vector

    async def rescore_vector(self) -> np.ndarray | None:
        return None  # one-stage mode

    def semantic_allowed(self) -> bool:
        return True

    def skip_reason(self) -> SemanticSkip | None:
        return None


class ChosenEmbedder:
    """The answer embedder: every answer embeds to `vector`, as the test sets it."""

    def __init__(self) -> None:
        self.vector = AGREEING

    async def embed(self, text: str, language: str = "en") -> np.ndarray:
        return self.vector


class World:
    def __init__(self, model: FakeModel, **verify: float) -> None:
        self.clock = ManualClock()
        config = VerifyConfig(sample_share=0.0, learned_sample_share=1.0, **verify)  # type: ignore[arg-type]
        semantic = SemanticConfig(threshold=0.9, flat_max_entries=1_000)
        self.thresholds = ThresholdController(config, semantic.threshold)
        self.tier = SemanticTier(
            semantic, MeaningGuard(semantic), self.thresholds, self.clock, CacheRecorder()
        )
        self.tier.set_dimension(DIM)
        self.memory = LruKTier(LruKConfig(), self.clock)
        self.service = CacheService(
            [self.memory], self.clock, CacheRecorder(), semantic=self.tier, learning=True
        )
        self.embedder = ChosenEmbedder()
        entries = EntryBuilder(
            CacheConfig(),
            DegradeConfig(),
            semantic,
            TtlPolicy(TtlConfig()),
            self.thresholds,
            self.clock,
            self.embedder,
        )
        learner = MissLearner(self.service, self.thresholds)
        self.answers = AnswerStore(self.service, entries, StoreRule(), LoopTurns(), learner=learner)
        self.client = UpstreamClient(
            UpstreamConfig(url="http://upstream.test/v1", max_retries=0),
            FakeTransport(responder=model),
        )
        gate = UpstreamGate(self.client, AlwaysClosedBreaker(), AdmissionControl(4, 4, 1.0))
        lemma_hits = HitSwitch(config)
        self.verifier = Verifier(
            config, gate, self.service, self.thresholds, lemma_hits, None, random.Random(7)
        )

    async def neighbour(self, answer: str = f"Answer to: {QUESTION}") -> Entry:
        """The entry near-misses learn about: its prompt on axis 1, its answer embedded."""
        entry = make_entry(
            "neighbour",
            partition=PARTITION,
            body=orjson.dumps(completion(answer)),
            stored_at=self.clock.time(),
            analysis=ANALYSIS.to_wire(),
            vector=axis(1).tobytes(),
            answer_vector=NEIGHBOUR_ANSWER.tobytes(),
        )
        await self.service.store(entry)
        return entry

    async def learned_threshold(self, entry: Entry) -> float | None:
        stored = await self.service.get_entry(entry.entry_id)
        assert stored is not None
        return stored.learned_threshold

    async def ask(self, name: str, vector: np.ndarray) -> LookupOutcome:
        return await self.service.lookup(request(name), Prompt(vector))

    async def answer_miss(self, name: str, vector: np.ndarray, outcome: LookupOutcome) -> None:
        """The miss's fresh answer stored, as its flight does, with its near-miss."""
        fresh = Answer(
            TAG + "-" + name,
            request(name),
            Prompt(vector),
            completion("Open the app and choose Reset PIN."),
            near_miss=outcome.near_miss,
        )
        assert await self.answers.store(fresh) is None

    @staticmethod
    def upstream_request() -> UpstreamRequest:
        body = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
        headers = (("Content-Type", "application/json"),)
        return UpstreamRequest("POST", "chat/completions", headers, json.dumps(body).encode())


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = World(FakeModel())
    await w.client.start()
    yield w
    await w.client.close()
    await w.tier.close()


async def test_an_agreeing_near_miss_lowers_the_learned_threshold_by_one_step(
    world: World,
) -> None:
    neighbour = await world.neighbour()
    outcome = await world.ask("q1", at(0.87, 2))
    # The request that teaches is a miss, and is answered upstream as any miss.
    assert outcome.hit is None and outcome.near_miss is not None
    assert outcome.near_miss.entry_id == neighbour.entry_id
    assert await world.learned_threshold(neighbour) is None
    await world.answer_miss("q1", at(0.87, 2), outcome)
    assert await world.learned_threshold(neighbour) == pytest.approx(0.89)  # 0.9 − one step
    assert world.thresholds.near_misses_agreed == 1
    # Neither the global threshold nor the global estimate heard of it.
    assert world.thresholds.global_threshold == pytest.approx(0.9)
    assert world.thresholds.estimator.estimate().verified == 0


async def test_learning_stops_at_the_similarity_seen(world: World) -> None:
    neighbour = await world.neighbour()
    for n in range(2, 7):  # each its own prompt: one stored already would be hit
        outcome = await world.ask(f"q{n}", at(0.87, n))
        await world.answer_miss(f"q{n}", at(0.87, n), outcome)
    assert await world.learned_threshold(neighbour) == pytest.approx(0.87, abs=1e-6)


async def test_a_disagreeing_near_miss_takes_the_learned_threshold_back_at_once(
    world: World,
) -> None:
    neighbour = await world.neighbour()
    await world.service.replace(replace(neighbour, learned_threshold=0.87))
    world.embedder.vector = DISAGREEING
    outcome = await world.ask("q1", at(0.88, 2))  # within the usual reach: still a near-miss
    assert outcome.hit is not None and outcome.hit.learned  # served through 0.87
    outcome = await world.ask("q2", at(0.86, 3))
    assert outcome.hit is None and outcome.near_miss is not None
    await world.answer_miss("q2", at(0.86, 3), outcome)
    assert await world.learned_threshold(neighbour) is None
    assert world.thresholds.near_misses_disagreed == 1


async def test_a_later_paraphrase_at_that_similarity_hits_marked_learned() -> None:
    world = World(FakeModel(), learn_step=0.05)
    await world.client.start()
    try:
        neighbour = await world.neighbour()
        outcome = await world.ask("q1", at(0.87, 2))
        assert outcome.hit is None
        before = await world.ask("q2", at(0.88, 3))  # the paraphrase, before the lesson: a miss
        assert before.hit is None
        await world.answer_miss("q1", at(0.87, 2), outcome)
        assert await world.learned_threshold(neighbour) == pytest.approx(0.87, abs=1e-6)
        after = await world.ask("q2", at(0.88, 3))
        assert after.hit is not None and after.hit.entry.entry_id == neighbour.entry_id
        assert after.hit.learned and after.hit.similarity == pytest.approx(0.88, abs=1e-6)
    finally:
        await world.client.close()
        await world.tier.close()


async def test_learned_hits_are_sampled_into_their_own_estimate(world: World) -> None:
    neighbour = await world.neighbour()
    await world.service.replace(replace(neighbour, learned_threshold=0.87))
    learned = (await world.ask("q1", at(0.88, 2))).hit
    usual = (await world.ask("q2", at(0.95, 3))).hit
    assert learned is not None and learned.learned
    assert usual is not None and not usual.learned
    assert not world.verifier.maybe_verify(usual, world.upstream_request)  # sample_share 0
    assert world.verifier.maybe_verify(learned, world.upstream_request)  # learned share 1
    await world.verifier.drain()
    assert world.thresholds.learned_hits.estimator.estimate().verified == 1  # the fake agrees
    assert world.thresholds.estimator.estimate().verified == 0
    assert world.thresholds.global_threshold == pytest.approx(0.9)
    assert await world.learned_threshold(neighbour) == pytest.approx(0.87)


async def test_a_wrong_learned_hit_resets_the_learned_threshold(world: World) -> None:
    neighbour = await world.neighbour(answer="Something else entirely.")
    await world.service.replace(replace(neighbour, learned_threshold=0.87))
    hit = (await world.ask("q1", at(0.88, 2))).hit
    assert hit is not None and hit.learned
    assert world.verifier.maybe_verify(hit, world.upstream_request)
    await world.verifier.drain()
    estimate = world.thresholds.learned_hits.estimator.estimate()
    assert (estimate.verified, estimate.wrong) == (1, 1)
    assert world.thresholds.estimator.estimate().verified == 0
    assert await world.learned_threshold(neighbour) is None
    assert (await world.ask("q2", at(0.88, 3))).hit is None


async def test_while_learned_hits_are_off_the_held_back_miss_feeds_their_estimate(
    world: World,
) -> None:
    neighbour = await world.neighbour()
    await world.service.replace(replace(neighbour, learned_threshold=0.87))
    for agreed in [False] * 3 + [True] * 7:
        world.thresholds.learned_hits.record(agreed)
    assert not world.thresholds.learned_hits.serving
    outcome = await world.ask("q1", at(0.88, 2))  # a learned hit, were they served
    assert outcome.hit is None and outcome.near_miss is not None
    assert outcome.near_miss.held_back
    await world.answer_miss("q1", at(0.88, 2), outcome)
    assert world.thresholds.learned_hits.estimator.estimate().verified == 11  # the fake agrees
    assert world.thresholds.estimator.estimate().verified == 0
