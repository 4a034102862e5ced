"""Prompt features from the configured spaCy and sentence-transformers models.

Both models run off the event loop: spaCy in its own worker thread, the embedding in the
embedder's micro-batching thread. When the analysis is first asked for, the embedding starts
too, since a lemma-key miss needs it next, and the two then run side by side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from core.config import SemanticConfig
from normalize.embedder import Embedder
from normalize.features import NoFeatures, PromptAnalysis, PromptFeatures
from normalize.fingerprint import lemma_key
from normalize.lemmas import LemmaAnalyzer
from normalize.request import CacheRequest

T = TypeVar("T")


class SemanticFeatureSource:
    """Lemma analyses and embeddings from the configured spaCy and sentence-transformers models.

    Until `start()` has loaded both models, every prompt gets exact matches only (the proxy
    serves from its first second; /readyz reports when the models are in)."""

    def __init__(self, config: SemanticConfig, embedder: Embedder | None = None) -> None:
        self._config = config
        self._embedder = embedder or Embedder(config)
        self._analyzer: LemmaAnalyzer | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def ready(self) -> bool:
        return self._analyzer is not None and self._embedder.loaded

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deja-spacy")
        loop = asyncio.get_running_loop()
        analyzer, _ = await asyncio.gather(
            loop.run_in_executor(self._executor, LemmaAnalyzer, self._config),
            self._embedder.start(),
        )
        self._analyzer = analyzer

    async def close(self) -> None:
        await self._embedder.close()
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True)

    def for_request(self, request: CacheRequest, loose_matching: bool) -> PromptFeatures:
        text = request.prompt_text
        analyzer = self._analyzer
        if not loose_matching or text is None or analyzer is None or not self._embedder.loaded:
            return NoFeatures()
        if not analyzer.analysable(text):
            return NoFeatures()
        return _LazyFeatures(self, request.partition, text)

    async def analyze(self, partition: str, text: str) -> PromptAnalysis:
        assert self._analyzer is not None and self._executor is not None, "not started"
        loop = asyncio.get_running_loop()
        analysis = await loop.run_in_executor(self._executor, self._analyzer.analyze, text)
        key = lemma_key(partition, analysis.key_material()) if self._config.lemma_key else None
        return PromptAnalysis(analysis, key, analysis.to_wire())

    async def embed(self, text: str) -> np.ndarray:
        return await self._embedder.embed(text)


class _LazyFeatures:
    def __init__(self, source: SemanticFeatureSource, partition: str, text: str) -> None:
        self._source = source
        self._partition = partition
        self._text = text
        self._analysis: asyncio.Task[PromptAnalysis] | None = None
        self._vector: asyncio.Task[np.ndarray] | None = None

    def semantic_allowed(self) -> bool:
        return True

    async def analysis(self) -> PromptAnalysis | None:
        if self._analysis is None:
            self._analysis = _task(self._source.analyze(self._partition, self._text))
            self._start_vector()
        # Shielded: the flight that stores the answer may still need it after this caller left.
        return await asyncio.shield(self._analysis)

    async def vector(self) -> np.ndarray | None:
        return await asyncio.shield(self._start_vector())

    def _start_vector(self) -> asyncio.Task[np.ndarray]:
        if self._vector is None:
            self._vector = _task(self._source.embed(self._text))
        return self._vector


def _task(work: Awaitable[T]) -> asyncio.Task[T]:
    async def run() -> T:
        return await work

    task = asyncio.get_running_loop().create_task(run())
    # Nobody may await a speculative task (the caller left); its failure is then not news.
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task
