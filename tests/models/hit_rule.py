"""The semantic tier's hit decision for one cached prompt and one query, built from the real
parts, for the scenario tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.semantic_config import SemanticConfig
from normalize.keys.text import canonical_text
from normalize.meaning.guards import GuardVerdict, MeaningGuard
from normalize.meaning.language import LanguageGate
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.runtime.sentence_encoder import SentenceEncoder


@dataclass(frozen=True, slots=True)
class Decision:
    hit: bool
    cosine: float
    verdict: GuardVerdict | None
    match: str  # "exact", "lemma", "semantic" or "" (a miss)


class HitRule:
    """The cache's decision for one cached prompt and one query, in the order of the lookup
    chain: an exact match of the canonical text; else, when the language gate lets both
    through, an equal lemma key; else cosine ≥ the threshold and the meaning guards agree."""

    def __init__(
        self,
        config: SemanticConfig,
        analyzer: LemmaAnalyzer,
        guard: MeaningGuard,
        embedder: SentenceEncoder,
    ) -> None:
        self._config = config
        self._analyzer = analyzer
        self._guard = guard
        self._embedder = embedder
        self._gate = LanguageGate(config.languages)

    def decide(self, query: str, cached: str) -> Decision:
        if canonical_text(query) == canonical_text(cached):
            return Decision(True, 1.0, None, "exact")
        vectors = self._embedder.encode([query, cached])
        cosine = float(np.dot(vectors[0], vectors[1]))
        if not (self._gate.supports(query) and self._gate.supports(cached)):
            return Decision(False, cosine, None, "")
        analysis_q, analysis_c = self._analyzer.analyze(query), self._analyzer.analyze(cached)
        if analysis_q.key_material() == analysis_c.key_material():
            return Decision(True, cosine, None, "lemma")
        verdict = self._guard.compare(analysis_q, analysis_c)
        hit = cosine >= self._config.threshold and verdict.agree
        return Decision(hit, cosine, verdict, "semantic" if hit else "")
