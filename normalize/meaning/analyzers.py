"""One analyzer for every configured language: the language gate sends each prompt to its own.

`PromptAnalyzer` is what the analysis worker runs (normalize/runtime/model_worker.py). English
prompts go to `LemmaAnalyzer` (spaCy), Chinese ones to `ChineseAnalyzer` (jieba, cn2an); a
prompt no configured pipeline reads, or one longer than `semantic.analysis_max_chars`, gets
the opaque analysis (exact matches only). Each `Analysis` carries its language, so the guards
never compare two languages and the lemma keys of two languages never meet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.semantic_config import SemanticConfig
from normalize.keys.text import canonical_text
from normalize.meaning.language import LanguageGate
from normalize.meaning.lemmas import LemmaAnalyzer
from normalize.meaning.signature import Analysis

if TYPE_CHECKING:
    from normalize.meaning.zh.analyzer import ChineseAnalyzer


class PromptAnalyzer:
    """Analyses prompts of every configured language (blocking; loads the pipelines)."""

    def __init__(self, config: SemanticConfig) -> None:
        self._gate = LanguageGate(config.languages)
        self._max_chars = config.analysis_max_chars
        self._english = LemmaAnalyzer(config) if "en" in config.languages else None
        self._chinese: ChineseAnalyzer | None = None
        if "zh" in config.languages:
            # Imported only when configured: jieba loads its dictionary (about a second).
            from normalize.meaning.zh.analyzer import ChineseAnalyzer

            self._chinese = ChineseAnalyzer(config)

    def language_of(self, text: str) -> str | None:
        """The language whose pipeline reads `text` (None: exact matches only)."""
        if len(text) > self._max_chars:
            return None
        return self._gate.language_of(text)

    def analyze(self, text: str) -> Analysis:
        return self.analyze_many([text])[0]

    def analyze_many(self, texts: Sequence[str]) -> list[Analysis]:
        """The analysis of each text, each language's texts in one batch of their own."""
        out = [Analysis.opaque(canonical_text(t)) for t in texts]
        english: list[int] = []
        for i, text in enumerate(texts):
            language = self.language_of(text)
            if language == "zh" and self._chinese is not None:
                out[i] = self._chinese.analyze(text)
            elif language == "en" and self._english is not None:
                english.append(i)
        if english and self._english is not None:
            analyses = self._english.analyze_many([texts[i] for i in english])
            for i, analysis in zip(english, analyses, strict=True):
                out[i] = analysis
        return out
