"""Lemma-key hits under the semantic hits' checks: sampled verification with an estimate of
their own, the switch that stops serving them over the target, and the answer check that never
waits for the prompt's embedding on a hit's path.

A real CacheService over a real LRU-K tier; the semantic index is a stand-in at its seam whose
answer check says what the test chose; the verifier asks a fake model at the upstream client's
transport seam (tests/support/fake_upstream.py).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson
import pytest

from core.clock import ManualClock
from core.config import LruKConfig, UpstreamConfig
from core.recorder import CacheRecorder
from core.semantic_config import VerifyConfig
from fallback.breaker import AlwaysClosedBreaker
from normalize.keys.request import CacheRequest, Route
from normalize.meaning.signature import Analysis, MeaningSignature
from normalize.prompt_features import PromptAnalysis, SemanticSkip
from proxy.answering.admission import AdmissionControl
from proxy.answering.gate import UpstreamGate
from proxy.answering.verifier import Verifier
from proxy.upstream.client import UpstreamClient, UpstreamRequest
from tests.support.entries import TAG, make_entry
from tests.support.fake_upstream import FakeModel, FakeTransport
from tiers.base import Lookup, MatchKind, TierName
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import HitSwitch, ThresholdController
from tiers.semantic.protocol import NullSemanticIndex
from tiers.service import CacheService

PARTITION = TAG + "p" * 48
LEMMA_KEY = TAG + "lemma:reset pin"
QUESTION = "How can I reset my PIN?"
REQUEST = CacheRequest(
    route=Route.CHAT,
    tenant="t",
    namespace="",
    model="m",
    partition=PARTITION,
    exact_key=TAG + "how can i reset my pin",
    prompt_text=QUESTION,
    stream=False,
    include_usage=False,
)
VECTOR = np.asarray([1.0, 0.0, 0.0, 0.0], dtype=np.float32)


class LemmaFeatures:
    """A prompt with a lemma key. Its embedding is ready at once, or only once `release` is
    set (`vector()` waits for it; `vector_if_ready()` never does)."""

    def __init__(self, ready: bool = True) -> None:
        self.release = asyncio.Event()
        if ready:
            self.release.set()
        self.vector_awaited = False

    async def analysis(self) -> PromptAnalysis | None:
        analysis = Analysis(("reset", "pin"), MeaningSignature())
        return PromptAnalysis(analysis, LEMMA_KEY, analysis.to_wire())

    async def vector(self) -> np.ndarray | None:
        self.vector_awaited = True
        await self.release.wait()
        return VECTOR

    def vector_if_ready(self) -> np.ndarray | None:
        return VECTOR if self.release.is_set() else None

    async def rescore_vector(self) -> np.ndarray | None:
        return None  # one-stage mode

    def semantic_allowed(self) -> bool:
        return True

    def skip_reason(self) -> SemanticSkip | None:
        return None


class AnswerCheckIndex(NullSemanticIndex):
    """The semantic index at its seam: its answer check says `contradicting`, and counts."""

    def __init__(self, contradicting: bool = False) -> None:
        self.contradicting = contradicting
        self.checks = 0

    async def contradicts(self, *args: Any, **kwargs: Any) -> bool:
        self.checks += 1
        return self.contradicting


class World:
    def __init__(self, model: FakeModel, contradicting: bool = False, share: float = 1.0) -> None:
        self.clock = ManualClock()
        self.index = AnswerCheckIndex(contradicting)
        config = VerifyConfig(sample_share=share)
        self.lemma_hits = HitSwitch(config)
        self.thresholds = ThresholdController(config, 0.86)
        self.service = CacheService(
            [LruKTier(LruKConfig(), self.clock)],
            self.clock,
            CacheRecorder(),
            semantic=self.index,
            lemma_hits=self.lemma_hits,
        )
        self.client = UpstreamClient(
            UpstreamConfig(url="http://upstream.test/v1", max_retries=0),
            FakeTransport(responder=model),
        )
        gate = UpstreamGate(self.client, AlwaysClosedBreaker(), AdmissionControl(4, 4, 1.0))
        self.verifier = Verifier(
            config, gate, self.service, self.thresholds, self.lemma_hits, None, random.Random(7)
        )

    async def store(self, cached_answer: str) -> None:
        """The entry a lemma twin of QUESTION finds: "How do I reset my PIN?" answered."""
        body: dict[str, Any] = {
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": cached_answer},
                    "finish_reason": "stop",
                }
            ],
        }
        entry = make_entry(
            "twin",
            partition=PARTITION,
            exact_key=TAG + "how do i reset my pin",
            lemma_key=LEMMA_KEY,
            body=orjson.dumps(body),
            stored_at=self.clock.time(),
        )
        await self.service.store(entry)

    @staticmethod
    def upstream_request() -> UpstreamRequest:
        body = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
        headers = (("Content-Type", "application/json"),)
        return UpstreamRequest("POST", "chat/completions", headers, json.dumps(body).encode())

    async def lemma_hit(self) -> Lookup:
        outcome = await self.service.lookup(REQUEST, LemmaFeatures())
        assert outcome.hit is not None and outcome.hit.match is MatchKind.LEMMA
        return outcome.hit


@pytest.fixture
def model() -> FakeModel:
    return FakeModel()


@pytest.fixture
async def world(model: FakeModel) -> AsyncIterator[World]:
    w = World(model)
    await w.client.start()
    yield w
    await w.client.close()


# --- the switch ----------------------------------------------------------------------------


def test_the_switch_turns_off_over_the_target_and_on_again_once_back_under() -> None:
    switch = HitSwitch(VerifyConfig(target_false_hit_rate=0.01))
    for _ in range(50):
        switch.record(True)
    assert switch.serving
    switch.record(False)  # 1 wrong of 51: 95% interval [0.3%, 10%], not clearly over 1%
    assert switch.serving
    switch.record(False)  # 2 of 52: the interval starts at 1.06%
    assert not switch.serving
    # Off until the rate itself is back at 1%: 2 wrong of 200 verifications.
    for _ in range(147):
        switch.record(True)
    assert not switch.serving and switch.estimator.estimate().verified == 199
    switch.record(True)
    assert switch.serving
    assert (switch.estimator.estimate().verified, switch.estimator.estimate().wrong) == (200, 2)


# --- sampling lemma hits ---------------------------------------------------------------------


async def test_a_sampled_lemma_hit_feeds_its_own_estimate_not_the_semantic_threshold(
    world: World, model: FakeModel
) -> None:
    await world.store("Answer to: How can I reset my PIN?")
    hit = await world.lemma_hit()
    assert world.verifier.maybe_verify(hit, world.upstream_request)
    await world.verifier.drain()
    lemma = world.lemma_hits.estimator.estimate()
    assert (lemma.verified, lemma.wrong) == (1, 0)
    assert world.thresholds.estimator.estimate().verified == 0
    assert world.thresholds.global_threshold == 0.86
    assert model.calls[-1]["messages"][0]["content"] == QUESTION


async def test_a_wrong_lemma_hit_is_counted_and_its_entry_loses_its_lemma_key(
    world: World, model: FakeModel
) -> None:
    await world.store("Answer to: How do I change my PIN?")
    hit = await world.lemma_hit()
    world.verifier.maybe_verify(hit, world.upstream_request)
    await world.verifier.drain()
    lemma = world.lemma_hits.estimator.estimate()
    assert (lemma.verified, lemma.wrong) == (1, 1)
    assert world.thresholds.estimator.estimate().verified == 0
    # The entry stays (its exact key, the semantic index); its lemma key no longer finds it.
    entry = await world.service.get_entry(hit.entry.entry_id)
    assert entry is not None and entry.lemma_key is None
    assert (await world.service.lookup(REQUEST, LemmaFeatures())).hit is None


async def test_lemma_hits_off_are_held_back_and_still_verified_to_come_back(
    world: World, model: FakeModel
) -> None:
    await world.store("Answer to: How can I reset my PIN?")
    for _ in range(2):
        world.lemma_hits.record(False)
    assert not world.lemma_hits.serving
    outcome = await world.service.lookup(REQUEST, LemmaFeatures())
    assert outcome.hit is None  # on to the semantic tier, which found nothing
    held_back = outcome.held_back_lemma
    assert held_back is not None and held_back.match is MatchKind.LEMMA
    for _ in range(198):
        assert world.verifier.maybe_verify(held_back, world.upstream_request)
        await world.verifier.drain()
    assert world.lemma_hits.serving  # 2 wrong of 200: back at the target
    served = await world.service.lookup(REQUEST, LemmaFeatures())
    assert served.hit is not None and served.hit.match is MatchKind.LEMMA


async def test_a_held_back_match_its_answer_check_refuses_is_not_asked_upstream(
    world: World, model: FakeModel
) -> None:
    await world.store("Answer to: How can I reset my PIN?")
    hit = await world.lemma_hit()

    async def refused() -> bool:
        return True

    assert world.verifier.maybe_verify(hit, world.upstream_request, None, refused)
    await world.verifier.drain()
    assert model.calls == [] and world.lemma_hits.estimator.estimate().verified == 0


# --- the answer check, never waiting for an embedding on the hit's path -----------------------


async def test_a_lemma_hit_with_a_ready_vector_is_checked_before_it_is_served(
    model: FakeModel,
) -> None:
    world = World(model, contradicting=True)
    await world.store("Answer to: How can I reset my PIN?")
    outcome = await world.service.lookup(REQUEST, LemmaFeatures())
    assert outcome.hit is None and world.index.checks == 1


async def test_a_lemma_hit_without_a_ready_vector_is_served_without_waiting_for_it(
    model: FakeModel,
) -> None:
    world = World(model, contradicting=True)
    await world.store("Answer to: How can I reset my PIN?")
    features = LemmaFeatures(ready=False)  # vector() never returns unless released
    outcome = await asyncio.wait_for(world.service.lookup(REQUEST, features), timeout=5.0)
    assert outcome.hit is not None and outcome.hit.match is MatchKind.LEMMA
    assert outcome.answer_check_due and not features.vector_awaited
    assert world.index.checks == 0


async def test_the_late_answer_check_drops_a_contradicted_lemma_key(model: FakeModel) -> None:
    world = World(model, contradicting=True)
    await world.store("Answer to: How can I reset my PIN?")
    features = LemmaFeatures(ready=False)
    outcome = await world.service.lookup(REQUEST, features)
    assert outcome.hit is not None
    assert world.verifier.check_later(REQUEST, features, outcome.hit)
    await asyncio.sleep(0)
    assert world.index.checks == 0  # waiting for the embedding, after the response
    features.release.set()
    await world.verifier.drain()
    assert world.index.checks == 1 and world.lemma_hits.refused_after_serving == 1
    # Not a verification: the estimate is of a random sample of lemma hits only.
    assert world.lemma_hits.estimator.estimate().verified == 0
    entry = await world.service.get_entry(outcome.hit.entry.entry_id)
    assert entry is not None and entry.lemma_key is None
    assert (await world.service.lookup(REQUEST, LemmaFeatures())).hit is None


async def test_a_late_answer_check_that_agrees_keeps_the_lemma_key(model: FakeModel) -> None:
    world = World(model, contradicting=False)
    await world.store("Answer to: How can I reset my PIN?")
    features = LemmaFeatures(ready=False)
    outcome = await world.service.lookup(REQUEST, features)
    assert outcome.hit is not None
    world.verifier.check_later(REQUEST, features, outcome.hit)
    features.release.set()
    await world.verifier.drain()
    assert world.lemma_hits.refused_after_serving == 0
    assert (await world.service.lookup(REQUEST, LemmaFeatures())).hit is not None


async def test_late_answer_checks_past_the_inflight_limit_are_counted_unchecked(
    model: FakeModel,
) -> None:
    world = World(model)
    await world.store("Answer to: How can I reset my PIN?")
    features = LemmaFeatures(ready=False)
    hit = Lookup(make_entry("twin", lemma_key=LEMMA_KEY), TierName.LRU_K, MatchKind.LEMMA)
    started = [world.verifier.check_later(REQUEST, features, hit) for _ in range(5)]
    assert started == [True] * 4 + [False]  # verify.max_inflight: 4
    assert world.verifier.late_checks_skipped == 1
    features.release.set()
    await world.verifier.drain()
