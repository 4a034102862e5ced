"""Background verification of a sampled share of semantic hits.

The client gets the cached answer at once; then, for `verify.sample_share` of semantic hits,
the same request is sent upstream in the background and the fresh answer is compared with the
cached one: first by normalized answer keys (canonical text, or tool names and arguments), then
by answer-embedding cosine (≥ `verify.answer_agreement` agrees; the cached answer's embedding
is the one the semantic tier holds, when attached). The outcome feeds the
threshold controller and the false-hit estimate, and moves the entry's own floor. A
disagreement also hands the fresh answer to the caller's sink (`verify.store_disagreeing`),
which stores it for the verified prompt: the answer was paid for, the prompt's repeats then hit
their own entry at once, and the neighbours now hold two answers, which the semantic tier's
answer check sees.

Verification calls go through the same admission control and breaker as real misses, and at
most `verify.max_inflight` run at once (past that a hit is simply not sampled), so checking
never crowds out serving.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson

from core.errors import DejaError
from core.semantic_config import VerifyConfig
from proxy.answering.answer_agreement import AnswerEmbedder, compare_answers
from proxy.answering.gate import UpstreamGate
from proxy.upstream.client import UpstreamRequest
from tiers.base import Lookup
from tiers.policies.thresholds import ThresholdController
from tiers.service import CacheService

_log = logging.getLogger("deja.verify")


# Stores a verification's fresh answer for the verified prompt; True if it was stored.
FreshAnswerSink = Callable[[dict[str, Any]], Awaitable[bool]]


class Verifier:
    def __init__(
        self,
        config: VerifyConfig,
        gate: UpstreamGate,
        service: CacheService,
        thresholds: ThresholdController,
        embedder: AnswerEmbedder | None,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._gate = gate
        self._service = service
        self._thresholds = thresholds
        self._embedder = embedder
        self._rng = rng or random.Random()
        self._tasks: set[asyncio.Task[None]] = set()
        self.verified = 0
        self.failed = 0
        self.kept = 0  # fresh answers stored after a disagreement

    def maybe_verify(
        self,
        lookup: Lookup,
        request: Callable[[], UpstreamRequest],
        keep_fresh: FreshAnswerSink | None = None,
    ) -> bool:
        """Start a background check of this semantic hit if it is sampled; True if started.
        On a disagreement the fresh answer goes to `keep_fresh` (which stores it for the
        verified prompt), when given and `verify.store_disagreeing` is on."""
        if self._config.sample_share <= 0 or len(self._tasks) >= self._config.max_inflight:
            return False
        if self._rng.random() >= self._config.sample_share:
            return False
        sink = keep_fresh if self._config.store_disagreeing else None
        task = asyncio.get_running_loop().create_task(self._verify(lookup, request(), sink))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _verify(
        self, lookup: Lookup, request: UpstreamRequest, keep_fresh: FreshAnswerSink | None
    ) -> None:
        try:
            fresh = await self._ask(request)
            if fresh is None:
                self.failed += 1
                return
            cached = lookup.entry.completion("", 0)
            # Inside the try: the answer embedding fails too while the feature worker restarts.
            verdict = await compare_answers(
                cached,
                fresh,
                self._embedder,
                self._thresholds.answers_agree,
                self._service.answer_vector(lookup.entry.entry_id),
            )
        except DejaError as exc:
            self.failed += 1
            _log.debug("verification of entry %s skipped: %s", lookup.entry.entry_id, exc)
            return
        await self.record(lookup, verdict.agreed)
        if not verdict.agreed and keep_fresh is not None:
            try:
                self.kept += await keep_fresh(fresh)
            except DejaError as exc:
                _log.debug("the fresh answer of a failed verification was not stored: %s", exc)

    async def record(self, lookup: Lookup, agreed: bool) -> None:
        """Evidence about a semantic hit: the estimate, the global threshold, the entry's floor."""
        assert lookup.similarity is not None, "only semantic hits are verified"
        self.verified += 1
        self._thresholds.record(agreed)
        entry = await self._service.get_entry(lookup.entry.entry_id)
        if entry is not None:
            floor = self._thresholds.floor_after(entry.threshold, lookup.similarity, agreed)
            if floor != entry.threshold:
                await self._service.replace(replace(entry, threshold=floor))

    async def _ask(self, request: UpstreamRequest) -> dict[str, Any] | None:
        async with self._gate.call(request) as response:
            if response.status >= 300:
                return None
            raw = await response.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        return body if isinstance(body, dict) else None
