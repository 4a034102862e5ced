"""A partition past OFF_LOOP_MIN_VECTORS is searched in the tier's search thread, and the hit rule
is the same: real spaCy analyses, real MiniLM vectors, real FAISS."""

from __future__ import annotations

import numpy as np

from core.clock import ManualClock
from core.config import SemanticConfig, VerifyConfig
from normalize.meaning.guards import MeaningGuard
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.runtime.embedder import Embedder
from tests.support.entries import make_entry
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.tier import OFF_LOOP_MIN_VECTORS, SemanticTier
from tiers.stats import CacheStats


async def test_a_large_partition_finds_the_paraphrase_and_refuses_the_negation(
    analyzer: LemmaAnalyzer, loaded_embedder: Embedder
) -> None:
    config = SemanticConfig()
    tier = SemanticTier(
        config,
        MeaningGuard(config),
        ThresholdController(VerifyConfig(), config.threshold),
        ManualClock(wall_start_s=1_700_001_010.0),
        CacheStats(),
    )
    tier.set_dimension(384)
    filler_analysis = analyzer.analyze("What is the weather like today?").to_wire()
    rng = np.random.default_rng(3)
    fillers = rng.standard_normal((OFF_LOOP_MIN_VECTORS + 100, 384)).astype(np.float32)
    fillers /= np.linalg.norm(fillers, axis=1, keepdims=True)
    try:
        for n, vector in enumerate(fillers):
            await tier.add(make_entry(f"f{n}", analysis=filler_analysis, vector=vector.tobytes()))
        stored = "Is it safe to take ibuprofen with coffee?"
        await tier.add(
            make_entry(
                "stored",
                analysis=analyzer.analyze(stored).to_wire(),
                vector=loaded_embedder.embed_many([stored])[0].astype(np.float32).tobytes(),
            )
        )
        assert tier.size() > OFF_LOOP_MIN_VECTORS

        async def search(text: str) -> list[str]:
            vector = loaded_embedder.embed_many([text])[0]
            found = await tier.search(make_entry().partition, vector, analyzer.analyze(text))
            return [c.entry_id.split("-", 1)[1] for c in found]

        assert await search("Is it safe to take ibuprofen with a coffee?") == ["stored"]
        assert await search("Is it not safe to take ibuprofen with coffee?") == []
    finally:
        await tier.close()
