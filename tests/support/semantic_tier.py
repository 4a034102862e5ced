"""A semantic tier over real FAISS and real meaning guards, as the composition root builds one,
for tests that drive it directly."""

from __future__ import annotations

from core.clock import Clock
from core.recorder import CacheRecorder
from core.semantic_config import SemanticConfig, VerifyConfig
from normalize.meaning.guards import MeaningGuard
from tiers.policies.thresholds import ThresholdController
from tiers.semantic.tier import SemanticTier


def semantic_tier(config: SemanticConfig, clock: Clock, dim: int) -> SemanticTier:
    tier = SemanticTier(
        config,
        MeaningGuard(config),
        ThresholdController(VerifyConfig(), config.threshold),
        clock,
        CacheRecorder(),
    )
    tier.set_dimension(dim)
    return tier
