"""Prompt features from the configured spaCy and sentence-transformers models.

Both models run in a child process (normalize/runtime/model_processes.py), so the proxy's event loop
never waits on them. A prompt's analysis and embedding are asked for together, once, the first
time the cache needs either (after the exact key missed everywhere), and reused when the answer
is stored. The language gate picks each prompt's pipeline (English or Chinese: its analysis
and its embedding model); prompts no configured pipeline can read (another language, longer
than `semantic.analysis_max_chars`) get exact matches only, as does everything while the models are
loading or if the feature process has failed.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from core.semantic_config import SemanticConfig
from normalize.keys.fingerprint import lemma_key
from normalize.keys.request import CacheRequest
from normalize.meaning.language import LanguageGate
from normalize.prompt_features import NoFeatures, PromptAnalysis, PromptFeatures, SemanticSkip
from normalize.runtime.model_processes import FeatureProcess, FeatureWorkerUnavailable, ParsedPrompt

_log = logging.getLogger("deja.features")


class SemanticFeatureSource:
    def __init__(self, config: SemanticConfig) -> None:
        self._config = config
        self._process = FeatureProcess(config)
        self._gate = LanguageGate(config.languages)

    @property
    def ready(self) -> bool:
        return self._process.ready

    @property
    def process(self) -> FeatureProcess:
        return self._process

    @property
    def rescore_dim(self) -> int:
        """Two-stage mode: the second model's dimension (0: one stage)."""
        return self._process.rescore_dim

    @property
    def dims(self) -> dict[str, int]:
        """The embedding dimension of each configured language's model."""
        return self._process.dims

    async def start(self) -> None:
        await self._process.start()

    async def close(self) -> None:
        await self._process.close()

    async def embed(self, text: str, language: str = "en") -> np.ndarray:
        """An embedding of an answer (the verifier and the semantic tier compare answers with
        it) by the model of its prompt's `language`: background work, queued behind every
        prompt a lookup waits for."""
        return await self._process.embed(text, language, background=True)

    def for_request(self, request: CacheRequest, loose_matching: bool) -> PromptFeatures:
        text = request.prompt_text
        if text is None:
            return NoFeatures(SemanticSkip.EXACT_ONLY)
        if not loose_matching:
            return NoFeatures(SemanticSkip.SCREEN)
        if not self._process.ready:
            return NoFeatures(SemanticSkip.SEMANTIC_OFF)
        # The language check waits until an exact miss asks for it: exact hits never pay.
        return _LazyFeatures(self, request.partition, text)

    def language_of(self, text: str) -> str | SemanticSkip:
        """The language whose pipeline reads `text`, or why none may (length, language)."""
        if len(text) > self._config.analysis_max_chars:
            return SemanticSkip.LENGTH
        language = self._gate.language_of(text)
        return SemanticSkip.LANGUAGE if language is None else language

    def prompt_analysis(self, partition: str, parsed: ParsedPrompt) -> PromptAnalysis:
        key = lemma_key(partition, parsed.key_material) if self._config.lemma_key else None
        return PromptAnalysis(parsed.analysis, key, parsed.wire)


class _LazyFeatures:
    def __init__(self, source: SemanticFeatureSource, partition: str, text: str) -> None:
        self._source = source
        self._partition = partition
        self._text = text
        self._work: asyncio.Task[tuple[ParsedPrompt, np.ndarray] | None] | None = None
        self._rescore: asyncio.Task[np.ndarray | None] | None = None
        self._allowed: bool | None = None
        self._skip: SemanticSkip | None = None
        self._language = ""

    def semantic_allowed(self) -> bool:
        if self._allowed is None:
            verdict = self._source.language_of(self._text)
            if isinstance(verdict, SemanticSkip):
                self._skip = verdict
            else:
                self._language = verdict
            self._allowed = self._skip is None
        return self._allowed

    def skip_reason(self) -> SemanticSkip | None:
        # Language or length once the gate has run; SEMANTIC_OFF once the worker failed it.
        self.semantic_allowed()
        return self._skip

    async def analysis(self) -> PromptAnalysis | None:
        both = await self._both()
        if both is None or not both[0].analysis.analysable:
            return None
        return self._source.prompt_analysis(self._partition, both[0])

    async def vector(self) -> np.ndarray | None:
        both = await self._both()
        return None if both is None else both[1]

    def vector_if_ready(self) -> np.ndarray | None:
        # The analysis and the embedding come back together (FeatureProcess.analyze), so once
        # a lookup has the analysis this is ready; the check is for any other order.
        work = self._work
        if work is None or not work.done() or work.cancelled() or work.exception() is not None:
            return None
        both = work.result()
        return None if both is None else both[1]

    async def rescore_vector(self) -> np.ndarray | None:
        if not self.semantic_allowed() or self._language != "en":
            return None  # the second model is English
        if self._rescore is None:
            self._rescore = asyncio.get_running_loop().create_task(self._compute_rescore())
        # Shielded: a lookup asks first, the store of the same prompt reuses it.
        return await asyncio.shield(self._rescore)

    async def _compute_rescore(self) -> np.ndarray | None:
        try:
            return await self._source.process.rescore(self._text)
        except FeatureWorkerUnavailable as exc:
            # The first stage still decides: a candidate in the band is then a miss.
            _log.debug("no second-stage vector for this prompt: %s", exc)
            return None

    async def _both(self) -> tuple[ParsedPrompt, np.ndarray] | None:
        if not self.semantic_allowed():
            return None
        if self._work is None:
            self._work = asyncio.get_running_loop().create_task(self._compute())
        # Shielded: the flight that stores the answer may still need it after this caller left.
        return await asyncio.shield(self._work)

    async def _compute(self) -> tuple[ParsedPrompt, np.ndarray] | None:
        try:
            return await self._source.process.analyze(self._text, self._language)
        except FeatureWorkerUnavailable as exc:
            # Exact matches still work; the request goes on without loose matching.
            _log.debug("no features for this prompt: %s", exc)
            self._skip = SemanticSkip.SEMANTIC_OFF
            return None
