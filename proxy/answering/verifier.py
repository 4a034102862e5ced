"""Background verification of a sampled share of semantic and lemma-key hits, and the late
answer check of lemma hits.

The client gets the cached answer at once; then, for `verify.sample_share` of semantic and of
lemma hits, the same request is sent upstream in the background and the fresh answer is
compared with the cached one: first by normalized answer keys (canonical text, or tool names
and arguments), then by answer-embedding cosine (≥ `verify.answer_agreement` agrees; the cached
answer's embedding is the one the semantic tier holds, when attached).

A semantic hit's outcome feeds the threshold controller and the false-hit estimate, and moves
the entry's own floor. A hit served only through its entry's learned threshold (learned from
near-misses, proxy/answering/miss_learning.py) is sampled at `verify.learned_sample_share`
instead, feeds an estimate of its own (`ThresholdController.learned_hits`), never the
global one or the global threshold, and a disagreement also drops that learned threshold.
A lemma hit's feeds the lemma estimate only (`HitSwitch`: lemma hits
have no similarity to move a threshold with), and a disagreement drops the entry's lemma key, so
the same mistake is not made twice (the entry stays for its exact key and semantic lookups).
While lemma hits are off, the matches held back are sampled the same way, after their answer
check, so the estimate can come back under the target. Either disagreement also hands the fresh
answer to the caller's sink (`verify.store_disagreeing`), which stores it for the verified
prompt: the answer was paid for, the prompt's repeats then hit their own entry at once, and the
neighbours now hold two answers, which the semantic tier's answer check sees.

A lemma hit served before its answer check could run (the prompt's embedding was not computed
yet) gets the check after the response (`check_later`): a contradiction drops the entry's lemma
key and is counted as refused after serving.

Verification calls go through the same admission control and breaker as real misses, and at
most `verify.max_inflight` run at once (past that a hit is simply not sampled); late answer
checks have a pool of the same size. Checking never crowds out serving.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

import orjson

from core.errors import DejaError
from core.semantic_config import VerifyConfig
from normalize.keys.request import CacheRequest
from normalize.prompt_features import PromptFeatures
from proxy.answering.answer_agreement import AnswerEmbedder, compare_answers
from proxy.answering.gate import UpstreamGate
from proxy.upstream.client import UpstreamRequest
from tiers.base import Lookup, MatchKind
from tiers.policies.thresholds import HitSwitch, ThresholdController
from tiers.service import CacheService

_log = logging.getLogger("deja.verify")


# Stores a verification's fresh answer for the verified prompt; True if it was stored.
FreshAnswerSink = Callable[[dict[str, Any]], Awaitable[bool]]
# Whether a held-back lemma match would have been refused by its answer check anyway.
AnswerCheck = Callable[[], Awaitable[bool]]


class Verifier:
    def __init__(
        self,
        config: VerifyConfig,
        gate: UpstreamGate,
        service: CacheService,
        thresholds: ThresholdController,
        lemma_hits: HitSwitch,
        embedder: AnswerEmbedder | None,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._gate = gate
        self._service = service
        self._thresholds = thresholds
        self._lemma_hits = lemma_hits
        self._embedder = embedder
        self._rng = rng or random.Random()
        self._tasks: set[asyncio.Task[None]] = set()
        self._late_checks: set[asyncio.Task[None]] = set()
        self.verified = 0
        self.failed = 0
        self.kept = 0  # fresh answers stored after a disagreement
        self.late_checks_skipped = 0  # lemma hits served unchecked: the late pool was full

    def maybe_verify(
        self,
        lookup: Lookup,
        request: Callable[[], UpstreamRequest],
        keep_fresh: FreshAnswerSink | None = None,
        refused_by_check: AnswerCheck | None = None,
    ) -> bool:
        """Start a background check of this semantic or lemma hit (or held-back lemma match)
        if it is sampled; True if started. On a disagreement the fresh answer goes to
        `keep_fresh` (which stores it for the verified prompt), when given and
        `verify.store_disagreeing` is on. A match whose `refused_by_check` says it would not
        have been served is no evidence: nothing is asked upstream for it."""
        assert lookup.match is not MatchKind.EXACT, "exact hits are not verified"
        # Hits served only through a learned threshold rest on evidence that is no uniform
        # sample: they are checked more often, into an estimate of their own.
        share = self._config.learned_sample_share if lookup.learned else self._config.sample_share
        if share <= 0 or len(self._tasks) >= self._config.max_inflight:
            return False
        if self._rng.random() >= share:
            return False
        sink = keep_fresh if self._config.store_disagreeing else None
        work = self._verify(lookup, request(), sink, refused_by_check)
        _run_in(self._tasks, work)
        return True

    def check_later(self, request: CacheRequest, features: PromptFeatures, lookup: Lookup) -> bool:
        """Run the answer check of a lemma hit served without it, in the background; True if
        started (False: `verify.max_inflight` checks are running, and the hit stays unchecked).
        A contradiction drops the entry's lemma key and counts as refused after serving."""
        assert lookup.match is MatchKind.LEMMA, "only lemma hits have their check deferred"
        if len(self._late_checks) >= self._config.max_inflight:
            self.late_checks_skipped += 1
            return False
        _run_in(self._late_checks, self._check(request, features, lookup))
        return True

    async def drain(self) -> None:
        running = [*self._tasks, *self._late_checks]
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    async def _check(self, request: CacheRequest, features: PromptFeatures, lookup: Lookup) -> None:
        entry_id = lookup.entry.entry_id
        try:
            if await self._service.contradicted(request, features, lookup.entry):
                self._lemma_hits.record_refused_after_serving()
                await self._service.drop_lemma_key(entry_id)
        except DejaError as exc:
            _log.debug("late answer check of entry %s skipped: %s", entry_id, exc)

    async def _verify(
        self,
        lookup: Lookup,
        request: UpstreamRequest,
        keep_fresh: FreshAnswerSink | None,
        refused_by_check: AnswerCheck | None,
    ) -> None:
        try:
            if refused_by_check is not None and await refused_by_check():
                return
            fresh = await self._ask(request)
            if fresh is None:
                self.failed += 1
                return
            cached = lookup.entry.completion("", 0)
            language = lookup.entry.language
            # Inside the try: the answer embedding fails too while the feature worker restarts.
            verdict = await compare_answers(
                cached,
                fresh,
                self._embedder,
                lambda cosine: self._thresholds.answers_agree(cosine, language),
                self._service.answer_vector(lookup.entry.entry_id),
                language,
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
        """Evidence about a semantic hit (the estimate, the global threshold, the entry's floor)
        or a lemma hit (the lemma estimate; a wrong one loses its lemma key)."""
        self.verified += 1
        if lookup.match is MatchKind.LEMMA:
            self._lemma_hits.record(agreed)
            if not agreed:
                await self._service.drop_lemma_key(lookup.entry.entry_id)
            return
        assert lookup.similarity is not None, "only semantic and lemma hits are verified"
        if lookup.learned:
            self._thresholds.learned_hits.estimator.record(agreed)
        else:
            self._thresholds.record(agreed)
        entry = await self._service.get_entry(lookup.entry.entry_id)
        if entry is not None:
            floor = self._thresholds.floor_after(entry.threshold, lookup.similarity, agreed)
            # A wrong hit through a learned threshold takes the learned threshold back at once.
            learned = entry.learned_threshold if agreed or not lookup.learned else None
            if floor != entry.threshold or learned != entry.learned_threshold:
                await self._service.replace(
                    replace(entry, threshold=floor, learned_threshold=learned)
                )

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


def _run_in(tasks: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]) -> None:
    """Start `work` as a task held in `tasks` until it is done."""
    task = asyncio.get_running_loop().create_task(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
