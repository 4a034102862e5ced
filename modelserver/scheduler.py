"""Continuous batching: which sequences compute which tokens in the next step.

Each step has a token budget (`max_batch_tokens`) and a sequence cap (`max_num_seqs`):

1. Running sequences that are decoding get one token each, first, so generation never stalls
   behind someone's long prompt.
2. Running sequences still prefilling get the next chunk of their prompt, as budget allows.
3. Waiting requests are admitted in arrival order while the cap, the budget and the free
   blocks allow. Admission reuses the longest cached prefix, so only the rest is computed.

When a running sequence needs a block and none is free, the most recently admitted running
sequence is preempted: its blocks are released (they stay cached, so most come back as a prefix
hit) and it goes back to the front of the queue, keeping the tokens it generated; on
readmission it recomputes them. The oldest sequence always makes progress, so the pool never
deadlocks as long as one sequence of `max_model_len` fits, which the engine checks on submit.

The scheduler knows token ids and blocks only; the engine runs the model and samples.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from modelserver.forward_batch import SequenceChunk
from modelserver.prefix_cache import PrefixCache


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


@dataclass(eq=False, slots=True)
class SequenceState:
    """A request's token state, owned and mutated by the scheduler only."""

    request_id: str
    token_ids: list[int]
    num_prompt_tokens: int
    max_tokens: int
    stop_token_ids: frozenset[int]
    cache_salt: str | None = None
    num_computed_tokens: int = 0
    num_cached_tokens: int | None = None
    """Prompt tokens served from the prefix cache at first admission (for `usage`)."""
    num_preemptions: int = field(default=0)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens


@dataclass(frozen=True, slots=True)
class ScheduledChunk:
    request_id: str
    chunk: SequenceChunk


@dataclass(frozen=True, slots=True)
class StepPlan:
    chunks: tuple[ScheduledChunk, ...]
    preempted: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.chunks


@dataclass(frozen=True, slots=True)
class SequenceUpdate:
    """What a step did to one sequence: the token it generated (if any) and whether it ended."""

    request_id: str
    token_id: int | None
    finish_reason: FinishReason | None
    num_cached_tokens: int


class Scheduler:
    def __init__(
        self,
        prefix_cache: PrefixCache,
        *,
        max_num_seqs: int,
        max_batch_tokens: int,
        max_model_len: int,
    ) -> None:
        self._cache = prefix_cache
        self._max_num_seqs = max_num_seqs
        self._max_batch_tokens = max_batch_tokens
        self._max_model_len = max_model_len
        self._waiting: deque[SequenceState] = deque()
        self._running: list[SequenceState] = []
        self.num_preemptions = 0

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def add(self, sequence: SequenceState) -> None:
        assert sequence.num_prompt_tokens > 0, "a prompt needs at least one token"
        assert sequence.num_prompt_tokens + sequence.max_tokens <= self._max_model_len, (
            f"{sequence.request_id} cannot fit max_model_len={self._max_model_len}"
        )
        self._waiting.append(sequence)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is, releasing its blocks. False if it is not here."""
        for sequence in self._running:
            if sequence.request_id == request_id:
                self._running.remove(sequence)
                self._cache.free(request_id)
                return True
        for sequence in self._waiting:
            if sequence.request_id == request_id:
                self._waiting.remove(sequence)
                return True
        return False

    def schedule(self) -> StepPlan:
        budget = self._max_batch_tokens
        chunks: list[ScheduledChunk] = []
        preempted: list[str] = []
        decoding = [s for s in self._running if s.num_computed_tokens == len(s.token_ids) - 1]
        prefilling = [s for s in self._running if s.num_computed_tokens < len(s.token_ids) - 1]
        for sequence in decoding + prefilling:
            if budget == 0:
                break
            if sequence not in self._running:  # preempted earlier in this loop
                continue
            num_new = min(len(sequence.token_ids) - sequence.num_computed_tokens, budget)
            victims = self._make_room(sequence, num_new)
            # Victims are the newest sequences. Admission happens only after every running
            # sequence got all it asked for, so sequences still prefilling are always the
            # newest, and a victim is never one already planned in this loop.
            assert not {c.request_id for c in chunks} & set(victims), "preempted a planned chunk"
            preempted.extend(victims)
            if sequence.request_id in victims:
                continue
            chunks.append(self._chunk(sequence, num_new))
            budget -= num_new
        if not preempted:
            budget = self._admit(budget, chunks)
        return StepPlan(tuple(chunks), tuple(preempted))

    def update(self, plan: StepPlan, sampled: dict[str, int]) -> list[SequenceUpdate]:
        """Record that `plan` ran; `sampled` maps each sequence that got logits to its token."""
        updates = []
        for scheduled in plan.chunks:
            sequence = self._find_running(scheduled.request_id)
            if sequence is None:  # aborted while its step ran
                continue
            sequence.num_computed_tokens += len(scheduled.chunk.token_ids)
            self._cache.commit(
                sequence.request_id, sequence.token_ids, sequence.num_computed_tokens
            )
            token_id = sampled.get(sequence.request_id)
            if token_id is None:
                continue  # a partial prefill chunk: nothing to report yet
            sequence.token_ids.append(token_id)
            finish = self._finish_reason(sequence, token_id)
            if finish is not None:
                self._running.remove(sequence)
                self._cache.free(sequence.request_id)
            updates.append(
                SequenceUpdate(
                    sequence.request_id, token_id, finish, sequence.num_cached_tokens or 0
                )
            )
        return updates

    def _finish_reason(self, sequence: SequenceState, token_id: int) -> FinishReason | None:
        if token_id in sequence.stop_token_ids:
            return FinishReason.STOP
        if (
            sequence.num_output_tokens >= sequence.max_tokens
            or len(sequence.token_ids) >= self._max_model_len
        ):
            return FinishReason.LENGTH
        return None

    def _make_room(self, sequence: SequenceState, num_new: int) -> list[str]:
        """Grow `sequence` to hold `num_new` more tokens, preempting the newest running
        sequences (possibly `sequence` itself, last) until it fits. Returns the preempted ids."""
        needed = sequence.num_computed_tokens + num_new
        victims: list[str] = []
        while not self._cache.grow(sequence.request_id, needed):
            victim = self._running.pop()
            self._cache.free(victim.request_id)
            victim.num_computed_tokens = 0
            victim.num_preemptions += 1
            self.num_preemptions += 1
            self._waiting.appendleft(victim)
            victims.append(victim.request_id)
            if victim is sequence:
                break
        return victims

    def _admit(self, budget: int, chunks: list[ScheduledChunk]) -> int:
        while self._waiting and budget > 0 and len(self._running) < self._max_num_seqs:
            sequence = self._waiting[0]
            match = self._cache.find_prefix(sequence.token_ids, sequence.cache_salt)
            num_new = min(len(sequence.token_ids) - match.num_cached_tokens, budget)
            if not self._cache.start(sequence.request_id, match, match.num_cached_tokens + num_new):
                break  # first come, first served: nobody overtakes the head of the queue
            self._waiting.popleft()
            if sequence.num_cached_tokens is None:
                sequence.num_cached_tokens = match.num_cached_tokens
            sequence.num_computed_tokens = match.num_cached_tokens
            self._running.append(sequence)
            chunks.append(self._chunk(sequence, num_new))
            budget -= num_new
        return budget

    def _chunk(self, sequence: SequenceState, num_new: int) -> ScheduledChunk:
        start = sequence.num_computed_tokens
        end = start + num_new
        return ScheduledChunk(
            sequence.request_id,
            SequenceChunk(
                token_ids=tuple(sequence.token_ids[start:end]),
                start_position=start,
                block_ids=tuple(self._cache.block_ids(sequence.request_id)),
                wants_logits=end == len(sequence.token_ids),
            ),
        )

    def _find_running(self, request_id: str) -> SequenceState | None:
        return next((s for s in self._running if s.request_id == request_id), None)
