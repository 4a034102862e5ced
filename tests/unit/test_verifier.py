"""Verification of semantic hits: how two answers are compared, and what a verdict changes.

The comparison is pure (a fake embedder stands in for MiniLM at its seam); the verifier runs
against a fake model at the upstream client's transport seam (tests/support/fake_upstream.py)
with a real LRU-K tier behind a real CacheService.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import orjson
import pytest

from core.clock import ManualClock
from core.config import LruKConfig, UpstreamConfig
from core.errors import DejaError
from core.recorder import CacheRecorder
from core.semantic_config import VerifyConfig
from fallback.breaker import AlwaysClosedBreaker
from proxy.answering.admission import AdmissionControl
from proxy.answering.answer_agreement import AnswerEmbedder, Verdict, answer_of, compare_answers
from proxy.answering.gate import UpstreamGate
from proxy.answering.verifier import Verifier
from proxy.upstream.client import UpstreamClient, UpstreamRequest
from tests.support.entries import TAG, make_entry
from tests.support.fake_upstream import FakeModel, FakeTransport
from tiers.base import Lookup, MatchKind, TierName
from tiers.lru_k import LruKTier
from tiers.policies.thresholds import HitSwitch, ThresholdController
from tiers.service import CacheService


def chat(content: str | None, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}


def call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


class TableEmbedder:
    """Unit vectors looked up by text: cosines chosen by the test."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self._vectors = {k: np.asarray(v) / np.linalg.norm(v) for k, v in vectors.items()}
        self.calls: list[str] = []

    async def embed(self, text: str, language: str = "en") -> np.ndarray:
        self.calls.append(text)
        return self._vectors[text]


# --- comparing answers ---------------------------------------------------------------------


def at_least(level: float) -> Callable[[float], bool]:
    return lambda cosine: cosine >= level


async def test_answers_equal_after_normalization_agree_by_key() -> None:
    embedder = TableEmbedder({})
    verdict = await compare_answers(
        chat("Reset it in the app under  Settings."),
        chat("reset it in the APP under settings."),
        embedder,
        at_least(0.85),
    )
    assert verdict == Verdict(True, "key")
    assert embedder.calls == []  # the cheap check decided


async def test_different_answers_fall_back_to_answer_embeddings() -> None:
    embedder = TableEmbedder({"A": [1.0, 0.0], "B": [0.9, (1 - 0.81) ** 0.5], "C": [0.5, 0.866]})
    near = await compare_answers(chat("A"), chat("B"), embedder, at_least(0.85))
    assert near.agreed and near.how == "embedding"
    assert near.similarity == pytest.approx(0.9)
    far = await compare_answers(chat("A"), chat("C"), embedder, at_least(0.85))
    assert not far.agreed and far.similarity == pytest.approx(0.5, abs=1e-3)
    assert not (await compare_answers(chat("A"), chat("B"), embedder, at_least(0.95))).agreed


async def test_a_held_answer_vector_is_not_embedded_again() -> None:
    embedder = TableEmbedder({"B": [0.9, (1 - 0.81) ** 0.5], "C": [0.5, 0.866]})
    held = np.asarray([1.0, 0.0])
    near = await compare_answers(chat("A"), chat("B"), embedder, at_least(0.85), held)
    assert near.agreed and near.similarity == pytest.approx(0.9)
    far = await compare_answers(chat("A"), chat("C"), embedder, at_least(0.85), held)
    assert not far.agreed
    assert embedder.calls == ["B", "C"]  # only the fresh answers: "A" was never embedded


async def test_without_an_embedder_only_the_keys_decide() -> None:
    assert await compare_answers(chat("yes"), chat("no"), None, at_least(0.85)) == Verdict(
        False, "key"
    )


async def test_tool_calls_compare_by_name_and_parsed_arguments() -> None:
    cached = chat(None, [call("get_weather", '{"city": "Paris", "unit": "C"}')])
    same = chat(None, [call("get_weather", '{"unit":"C","city":"Paris"}')])
    other_args = chat(None, [call("get_weather", '{"city": "Rome", "unit": "C"}')])
    other_name = chat(None, [call("get_time", '{"city": "Paris", "unit": "C"}')])
    assert await compare_answers(cached, same, None, at_least(0.85)) == Verdict(True, "tools")
    assert await compare_answers(cached, other_args, None, at_least(0.85)) == Verdict(
        False, "tools"
    )
    assert await compare_answers(cached, other_name, None, at_least(0.85)) == Verdict(
        False, "tools"
    )
    # A tool call against a text answer never agrees, whatever the text.
    assert not (await compare_answers(cached, chat("Paris: 20 C"), None, at_least(0.85))).agreed


def test_answer_of_reads_chat_tool_calls_and_legacy_text() -> None:
    assert answer_of(chat("hi")) == ("hi", [])
    assert answer_of(chat(None, [call("f", "not json")])) == ("", [("f", "not json")])
    legacy = {"object": "text_completion", "choices": [{"index": 0, "text": "42"}]}
    assert answer_of(legacy) == ("42", [])
    assert answer_of({"choices": []}) == ("", [])


# --- the verifier ----------------------------------------------------------------------------


class BrokenEmbedder:
    """The feature worker is restarting."""

    async def embed(self, text: str, language: str = "en") -> np.ndarray:
        raise DejaError("the feature worker is not running")


class World:
    def __init__(
        self,
        model: FakeModel,
        share: float = 1.0,
        max_inflight: int = 4,
        embedder: AnswerEmbedder | None = None,
        store_disagreeing: bool = True,
    ) -> None:
        self.clock = ManualClock()
        self.service = CacheService(
            [LruKTier(LruKConfig(), self.clock)], self.clock, CacheRecorder()
        )
        config = VerifyConfig(
            sample_share=share, max_inflight=max_inflight, store_disagreeing=store_disagreeing
        )
        self.thresholds = ThresholdController(config, 0.86)
        self.lemma_hits = HitSwitch(config)
        self.client = UpstreamClient(
            UpstreamConfig(url="http://upstream.test/v1", max_retries=0),
            FakeTransport(responder=model),
        )
        gate = UpstreamGate(self.client, AlwaysClosedBreaker(), AdmissionControl(4, 4, 1.0))
        self.verifier = Verifier(
            config, gate, self.service, self.thresholds, self.lemma_hits, embedder, random.Random(7)
        )

    async def hit(self, cached_answer: str, similarity: float = 0.9) -> Lookup:
        body = chat(cached_answer) | {"model": "m"}
        body["choices"][0]["finish_reason"] = "stop"
        entry = make_entry(
            "e1",
            partition=TAG + "p",
            exact_key="k1",
            body=orjson.dumps({k: v for k, v in body.items() if k != "id"}),
            stored_at=self.clock.time(),
            grace_s=3600.0,
            threshold=0.80,
        )
        await self.service.store(entry)
        return Lookup(entry, TierName.SEMANTIC, MatchKind.SEMANTIC, similarity)

    @staticmethod
    def request(question: str) -> UpstreamRequest:
        body = {"model": "m", "messages": [{"role": "user", "content": question}]}
        headers = (("Content-Type", "application/json"),)
        return UpstreamRequest("POST", "chat/completions", headers, json.dumps(body).encode())

    async def floor(self) -> float:
        entry = await self.service.get_entry(f"{TAG}-e1")
        assert entry is not None
        return entry.threshold


@pytest.fixture
def model() -> FakeModel:
    return FakeModel()


@pytest.fixture
async def world(model: FakeModel) -> AsyncIterator[World]:
    w = World(model)
    await w.client.start()
    yield w
    await w.client.close()


async def test_an_agreeing_verification_counts_a_true_hit(world: World, model: FakeModel) -> None:
    lookup = await world.hit("Answer to: how do I reset my pin?")
    assert world.verifier.maybe_verify(lookup, lambda: world.request("How do I reset my PIN?"))
    await world.verifier.drain()
    estimate = world.thresholds.estimator.estimate()
    assert (estimate.verified, estimate.wrong) == (1, 0)
    assert world.thresholds.global_threshold < 0.86
    assert await world.floor() == 0.80
    # The check was a plain, non-streamed call of the client's request.
    assert model.calls[-1]["messages"][0]["content"] == "How do I reset my PIN?"
    assert "stream" not in model.calls[-1]


async def test_a_disagreeing_verification_counts_a_false_hit_and_raises_the_floor(
    world: World, model: FakeModel
) -> None:
    lookup = await world.hit("Answer to: how do I change my pin?", similarity=0.93)
    world.verifier.maybe_verify(lookup, lambda: world.request("How do I unblock my PIN?"))
    await world.verifier.drain()
    estimate = world.thresholds.estimator.estimate()
    assert (estimate.verified, estimate.wrong) == (1, 1)
    assert world.thresholds.global_threshold == pytest.approx(0.87)
    assert await world.floor() == pytest.approx(0.94)
    assert world.verifier.verified == 1


async def test_an_upstream_failure_is_no_evidence(world: World, model: FakeModel) -> None:
    model.status = 500
    lookup = await world.hit("Answer to: q")
    world.verifier.maybe_verify(lookup, lambda: world.request("q"))
    await world.verifier.drain()
    assert world.verifier.failed == 1 and world.verifier.verified == 0
    assert world.thresholds.estimator.estimate().verified == 0
    assert world.thresholds.global_threshold == 0.86


async def test_an_answer_embedding_failure_is_no_evidence(model: FakeModel) -> None:
    world = World(model, embedder=BrokenEmbedder())
    model.answer = lambda body: "A different answer."
    lookup = await world.hit("Answer to: q")
    await world.client.start()
    try:
        world.verifier.maybe_verify(lookup, lambda: world.request("q"))
        await world.verifier.drain()
    finally:
        await world.client.close()
    assert (world.verifier.failed, world.verifier.verified) == (1, 0)
    assert world.thresholds.global_threshold == 0.86


async def test_only_the_configured_share_is_sampled(model: FakeModel) -> None:
    world = World(model, share=0.25)
    lookup = await world.hit("Answer to: q")
    started = 0
    await world.client.start()
    try:
        for _ in range(400):
            started += world.verifier.maybe_verify(lookup, lambda: world.request("q"))
            await world.verifier.drain()
    finally:
        await world.client.close()
    assert 70 <= started <= 130  # 100 expected; seeded, so exact run to run
    assert world.thresholds.estimator.estimate().verified == started


async def test_nothing_is_sampled_at_share_zero_or_past_the_inflight_limit(
    model: FakeModel,
) -> None:
    off = World(model, share=0.0)
    lookup = await off.hit("Answer to: q")
    assert not off.verifier.maybe_verify(lookup, lambda: off.request("q"))
    busy = World(model, share=1.0, max_inflight=1)
    await busy.client.start()
    model.delay_s = 0.2
    try:
        assert busy.verifier.maybe_verify(lookup, lambda: busy.request("q"))
        assert not busy.verifier.maybe_verify(lookup, lambda: busy.request("q"))
        await busy.verifier.drain()
    finally:
        await busy.client.close()
    assert busy.thresholds.estimator.estimate().verified == 1


class Keeper:
    """Where the handler would store a disagreeing verification's fresh answer."""

    def __init__(self) -> None:
        self.kept: list[dict[str, Any]] = []

    async def __call__(self, fresh: dict[str, Any]) -> bool:
        self.kept.append(fresh)
        return True


async def test_a_disagreement_hands_the_fresh_answer_on_to_be_stored(
    world: World, model: FakeModel
) -> None:
    keeper = Keeper()
    lookup = await world.hit("Answer to: how do I change my pin?", similarity=0.93)
    world.verifier.maybe_verify(lookup, lambda: world.request("How do I unblock my PIN?"), keeper)
    await world.verifier.drain()
    assert [answer_of(f)[0] for f in keeper.kept] == ["Answer to: How do I unblock my PIN?"]
    assert world.verifier.kept == 1


async def test_an_agreement_keeps_nothing(world: World, model: FakeModel) -> None:
    keeper = Keeper()
    lookup = await world.hit("Answer to: how do I reset my pin?")
    world.verifier.maybe_verify(lookup, lambda: world.request("How do I reset my PIN?"), keeper)
    await world.verifier.drain()
    assert keeper.kept == [] and world.verifier.kept == 0


async def test_keeping_fresh_answers_can_be_turned_off(model: FakeModel) -> None:
    world = World(model, store_disagreeing=False)
    keeper = Keeper()
    lookup = await world.hit("Answer to: how do I change my pin?", similarity=0.93)
    await world.client.start()
    try:
        world.verifier.maybe_verify(
            lookup, lambda: world.request("How do I unblock my PIN?"), keeper
        )
        await world.verifier.drain()
    finally:
        await world.client.close()
    assert keeper.kept == [] and world.thresholds.estimator.estimate().wrong == 1
