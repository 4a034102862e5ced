"""The semantic tier refuses a hit that a neighbour contradicts (`semantic.answer_margin`).

Real spaCy analyses, real MiniLM vectors for prompts and answers, real FAISS. The query "How do
I reset my PIN?" has two close neighbours: "How can I reset my PIN?" (cosine 0.995) and "How do
I go about resetting my PIN?" (0.978); both pass the guards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from core.clock import ManualClock
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.runtime.sentence_encoder import SentenceEncoder
from tests.support.entries import make_entry
from tiers.base import Entry
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.tier import SemanticTier

QUERY = "How do I reset my PIN?"
NEAREST = "How can I reset my PIN?"
NEXT = "How do I go about resetting my PIN?"
CHANGE = "To change your PIN, open Settings, then Card, then Change PIN."
CHANGE_AGAIN = "To change your PIN, open Settings, then Card, and then Change PIN."
BLOCKED = "Your PIN is blocked after three wrong tries; unblock it at any of our ATMs."


class Fixture:
    def __init__(self, analyzer: LemmaAnalyzer, embedder: SentenceEncoder, margin: float) -> None:
        self.config = SemanticConfig(answer_margin=margin)
        self.analyzer, self.embedder = analyzer, embedder
        self.recorder = CacheRecorder()
        self.tier = SemanticTier(
            self.config,
            MeaningGuard(self.config),
            ThresholdController(VerifyConfig(), self.config.threshold),
            ManualClock(wall_start_s=1_700_001_010.0),
            self.recorder,
        )
        self.tier.set_dimension(384)

    def entry(self, name: str, prompt: str, answer: str | None) -> Entry:
        vectors = self.embedder.encode([prompt, answer or ""])
        return make_entry(
            name,
            analysis=self.analyzer.analyze(prompt).to_wire(),
            vector=vectors[0].astype(np.float32).tobytes(),
            answer_vector=None if answer is None else vectors[1].astype(np.float32).tobytes(),
        )

    async def contradicts(self, entry_id: str) -> bool:
        vector = self.embedder.encode([QUERY])[0]
        analysis = self.analyzer.analyze(QUERY)
        return await self.tier.contradicts(make_entry().partition, vector, analysis, entry_id)

    async def search(self) -> list[str]:
        vector = self.embedder.encode([QUERY])[0]
        found = await self.tier.search(make_entry().partition, vector, self.analyzer.analyze(QUERY))
        return [c.entry_id.split("-", 1)[1] for c in found]


Make = Callable[..., Fixture]


@pytest.fixture
def make(analyzer: LemmaAnalyzer, sentence_encoder: SentenceEncoder) -> Make:
    def build(margin: float = SemanticConfig().answer_margin) -> Fixture:
        return Fixture(analyzer, sentence_encoder, margin)

    return build


async def test_a_neighbour_answered_differently_refuses_the_hit(make: Make) -> None:
    f = make()
    await f.tier.add(f.entry("near", NEAREST, CHANGE))
    await f.tier.add(f.entry("next", NEXT, BLOCKED))
    assert await f.search() == []
    assert f.recorder.snapshot().guard_rejections["answers"] == 1


async def test_neighbours_that_agree_let_the_nearest_answer(make: Make) -> None:
    f = make()
    await f.tier.add(f.entry("near", NEAREST, CHANGE))
    await f.tier.add(f.entry("next", NEXT, CHANGE_AGAIN))
    assert await f.search() == ["near"]


async def test_a_neighbour_asking_another_question_does_not_contradict(make: Make) -> None:
    f = make()
    await f.tier.add(f.entry("near", NEAREST, CHANGE))
    # 0.957 to the query, but negated: the guards say it is another question.
    await f.tier.add(f.entry("negated", "How do I not reset my PIN?", BLOCKED))
    assert await f.search() == ["near"]


async def test_a_neighbour_outside_the_margin_does_not_contradict(make: Make) -> None:
    f = make(0.01)  # the second neighbour is 0.017 further away
    await f.tier.add(f.entry("near", NEAREST, CHANGE))
    await f.tier.add(f.entry("next", NEXT, BLOCKED))
    assert await f.search() == ["near"]


async def test_the_check_can_be_turned_off(make: Make) -> None:
    f = make(0.0)
    await f.tier.add(f.entry("near", NEAREST, CHANGE))
    await f.tier.add(f.entry("next", NEXT, BLOCKED))
    assert await f.search() == ["near"]


async def test_an_answer_vector_attached_later_takes_part(make: Make) -> None:
    f = make()
    await f.tier.add(f.entry("near", NEAREST, CHANGE))
    late = f.entry("next", NEXT, BLOCKED)
    await f.tier.add(replace(late, answer_vector=None))
    assert await f.search() == ["near"]  # nothing to compare with yet
    assert f.tier.answer_vector(late.entry_id) is None
    await f.tier.update(late)
    assert await f.search() == []
    # The verifier reads it back rather than embedding the cached answer again: as the tier
    # holds it, rounded to float16 (tiers/semantic/vector_rows.py), and handed out as float32.
    assert late.answer_vector is not None
    attached = np.frombuffer(late.answer_vector, dtype=np.float32)
    held = f.tier.answer_vector(late.entry_id)
    assert held is not None and held.dtype == np.float32
    assert np.array_equal(held, attached.astype(np.float16).astype(np.float32))


async def test_a_lemma_key_match_is_checked_the_same_way(make: Make) -> None:
    # "How do I reset my PIN?" and "How can I reset my PIN?" share a lemma key: the lookup
    # asks the tier whether that match is contradicted.
    f = make()
    near = f.entry("near", NEAREST, CHANGE)
    await f.tier.add(near)
    await f.tier.add(f.entry("next", NEXT, CHANGE_AGAIN))
    assert not await f.contradicts(near.entry_id)
    await f.tier.add(f.entry("other", "How can I go about resetting my PIN?", BLOCKED))
    assert await f.contradicts(near.entry_id)
    assert f.recorder.snapshot().guard_rejections["answers"] == 1
