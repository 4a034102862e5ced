"""The engine: one thread that owns the model, the KV pool and the scheduler, and loops.

    HTTP handlers ──submit/abort──▶ inbox ──▶ [engine thread]  schedule → forward → sample
          ▲                                                         │
          └──────────── sink(GenerationOutput), one per token ◀─────┘

Everything mutable (scheduler, prefix cache, block pool, KV tensors, generators) is touched by
the engine thread only, so none of it needs a lock; other threads talk to it through the inbox
and read the `EngineStats` snapshot it publishes after every step. torch releases the GIL inside
its kernels, so the event loop stays responsive while a step runs.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from modelserver.errors import ContextLengthExceeded, EngineUnavailable, Overloaded
from modelserver.forward_batch import ForwardBatch, build_forward_batch, order_chunks
from modelserver.kv_cache import KVCache
from modelserver.penalties import TokenHistory
from modelserver.prefix_cache import PrefixCache
from modelserver.sampler import SampledToken, SamplingParams, make_generator, sample
from modelserver.scheduler import FinishReason, Scheduler, SequenceState, StepPlan

logger = logging.getLogger(__name__)

THROUGHPUT_WINDOW_S = 10.0


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams
    cache_salt: str | None = None


@dataclass(frozen=True, slots=True)
class GenerationOutput:
    """One step's news for one request: a new token, the end, or a failure."""

    request_id: str
    token: SampledToken | None
    finish_reason: FinishReason | None
    num_prompt_tokens: int
    num_cached_tokens: int
    error: EngineUnavailable | None = None


OutputSink = Callable[[GenerationOutput], None]


class CausalLM(Protocol):
    """What the engine needs of a model (`model.LlamaModel`)."""

    def forward(self, batch: ForwardBatch, kv: KVCache) -> torch.Tensor:
        """Fill `kv` for the batch; logits of the chunks that want them, `[rows, vocab]`."""
        ...


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A snapshot, published by the engine thread after every step."""

    alive: bool = True
    num_waiting: int = 0
    num_running: int = 0
    num_blocks: int = 0
    num_used_blocks: int = 0
    num_free_blocks: int = 0
    num_cached_blocks: int = 0
    num_evictions: int = 0
    num_preemptions: int = 0
    num_queried_tokens: int = 0
    """Prompt tokens looked up in the prefix cache (at first admission)."""
    num_hit_tokens: int = 0
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    num_steps: int = 0
    generation_tokens_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class _Submit:
    request: GenerationRequest
    sink: OutputSink


@dataclass(frozen=True, slots=True)
class _Abort:
    request_id: str


class _Stop:
    pass


@dataclass(slots=True)
class _Counters:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    finished: int = 0
    aborted: int = 0
    steps: int = 0


@dataclass(slots=True)
class _Live:
    request: GenerationRequest
    sink: OutputSink
    generator: torch.Generator
    history: TokenHistory
    """Prompt and generated ids, for the penalties; kept across preemptions like the scheduler's
    own copy, which the engine does not reach into."""


class Engine:
    def __init__(
        self,
        model: CausalLM,
        kv_cache: KVCache,
        prefix_cache: PrefixCache,
        scheduler: Scheduler,
        *,
        max_model_len: int,
        max_live_requests: int,
        seed_source: Callable[[], int],
        clock: Callable[[], float],
    ) -> None:
        self.max_model_len = max_model_len
        self._model = model
        self._kv = kv_cache
        self._cache = prefix_cache
        self._scheduler = scheduler
        self._max_live = max_live_requests
        self._seed_source = seed_source
        self._clock = clock
        self._inbox: queue.SimpleQueue[_Submit | _Abort | _Stop] = queue.SimpleQueue()
        self._live: dict[str, _Live] = {}
        # Submitted and not yet finished, counted across threads for admission control.
        self._num_pending = 0
        self._pending_lock = threading.Lock()
        self._alive = True
        self._thread: threading.Thread | None = None
        self._recent: deque[tuple[float, int]] = deque()
        self._counters = _Counters()
        self._stats = self._snapshot()

    # --- any thread ----------------------------------------------------------------------

    def submit(self, request: GenerationRequest, sink: OutputSink) -> None:
        """Queue a request; `sink` gets its outputs on the engine thread. Raises at once when the
        request can never fit, the queue is full or the engine has stopped."""
        total = len(request.prompt_token_ids) + request.sampling.max_tokens
        if total > self.max_model_len:
            raise ContextLengthExceeded(
                f"this model's maximum context length is {self.max_model_len} tokens; the "
                f"prompt has {len(request.prompt_token_ids)} and max_tokens asks for "
                f"{request.sampling.max_tokens} more"
            )
        with self._pending_lock:
            if not self._alive:
                raise EngineUnavailable("the engine has stopped")
            if self._num_pending >= self._max_live:
                raise Overloaded("too many requests are waiting", retry_after_s=1)
            self._num_pending += 1
        self._inbox.put(_Submit(request, sink))

    def abort(self, request_id: str) -> None:
        """Stop a request (its client went away) and free its blocks; no more outputs follow."""
        self._inbox.put(_Abort(request_id))

    def stats(self) -> EngineStats:
        return self._stats

    def start(self) -> None:
        assert self._thread is None, "the engine is already started"
        self._thread = threading.Thread(target=self._run, name="modelserver-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread; requests still in flight get an `EngineUnavailable` error."""
        if self._thread is None:
            return
        self._inbox.put(_Stop())
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the engine did not stop within {timeout_s} s"
        self._thread = None

    # --- the engine thread (or a test driving it directly) ------------------------------------

    def run_until_idle(self) -> None:
        """Apply everything submitted and step until no request is left (tests, warm-up)."""
        while self.step():
            pass

    def step(self) -> bool:
        """Apply queued commands and run one scheduler step; False when there was nothing to do.
        For driving the engine without its thread (tests, warm-up)."""
        assert self._thread is None, "the engine thread is running"
        if not self._drain_inbox(block=False):
            return False
        ran = self._step()
        self._stats = self._snapshot()  # also after commands alone (an abort, a refused submit)
        return ran

    def _step(self) -> bool:
        plan = self._scheduler.schedule()
        if plan.is_empty:
            return False
        sampled = self._forward_and_sample(plan)
        now = self._clock()
        deliveries: list[tuple[OutputSink, GenerationOutput]] = []
        for update in self._scheduler.update(plan, {r: t.token_id for r, t in sampled.items()}):
            live = self._live[update.request_id]
            if update.token_id is not None:
                live.history.append(update.token_id)
            if update.finish_reason is not None:
                del self._live[update.request_id]
                self._finish_one(aborted=False)
            output = GenerationOutput(
                update.request_id,
                sampled[update.request_id],
                update.finish_reason,
                len(live.request.prompt_token_ids),
                update.num_cached_tokens,
            )
            deliveries.append((live.sink, output))
        self._record_step(now, num_generated=len(sampled))
        # Publish the stats before the outputs, so a client that has seen its last token finds
        # the blocks already counted as free.
        self._stats = self._snapshot()
        for sink, output in deliveries:
            sink(output)
        return True

    def _forward_and_sample(self, plan: StepPlan) -> dict[str, SampledToken]:
        ordered = [plan.chunks[i] for i in order_chunks([s.chunk for s in plan.chunks])]
        batch = build_forward_batch(
            [s.chunk for s in ordered], block_size=self._kv.block_size, device=self._kv.device
        )
        logits = self._model.forward(batch, self._kv)
        sampling_ids = [s.request_id for s in ordered if s.chunk.wants_logits]
        live = [self._live[r] for r in sampling_ids]
        tokens = sample(
            logits,
            [x.request.sampling for x in live],
            [x.generator for x in live],
            [x.history for x in live],
        )
        return dict(zip(sampling_ids, tokens, strict=True))

    def _run(self) -> None:
        try:
            while self._drain_inbox(block=not self._scheduler.has_work()):
                self._step()
                self._stats = self._snapshot()
            self._shut_down("the model server is shutting down")
        except Exception:
            # A failed step leaves the KV pool in an unknown state: fail every request loudly
            # and report not-ready rather than serve wrong tokens.
            logger.exception("engine step failed; the engine has stopped")
            self._shut_down("the engine failed; see the server log")

    def _drain_inbox(self, *, block: bool) -> bool:
        """Apply queued commands (waiting for one if `block`); False once told to stop."""
        while True:
            try:
                command = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if isinstance(command, _Stop):
                return False
            if isinstance(command, _Submit):
                self._accept(command)
            elif command.request_id in self._live:
                self._scheduler.abort(command.request_id)
                del self._live[command.request_id]
                self._finish_one(aborted=True)

    def _accept(self, command: _Submit) -> None:
        request = command.request
        assert request.request_id not in self._live, f"duplicate id {request.request_id}"
        self._live[request.request_id] = _Live(
            request,
            command.sink,
            make_generator(request.sampling, self._seed_source()),
            TokenHistory(request.prompt_token_ids, request.sampling.max_tokens),
        )
        self._counters.prompt_tokens += len(request.prompt_token_ids)
        self._scheduler.add(
            SequenceState(
                request_id=request.request_id,
                token_ids=list(request.prompt_token_ids),
                num_prompt_tokens=len(request.prompt_token_ids),
                max_tokens=request.sampling.max_tokens,
                stop_token_ids=request.sampling.stop_token_ids,
                cache_salt=request.cache_salt,
            )
        )

    def _finish_one(self, *, aborted: bool) -> None:
        if aborted:
            self._counters.aborted += 1
        else:
            self._counters.finished += 1
        with self._pending_lock:
            self._num_pending -= 1

    def _shut_down(self, reason: str) -> None:
        with self._pending_lock:
            self._alive = False
        for request_id, live in list(self._live.items()):
            self._scheduler.abort(request_id)
            live.sink(
                GenerationOutput(
                    request_id,
                    None,
                    None,
                    len(live.request.prompt_token_ids),
                    0,
                    error=EngineUnavailable(reason),
                )
            )
        self._live.clear()
        self._stats = self._snapshot()

    def _record_step(self, now: float, *, num_generated: int) -> None:
        self._counters.steps += 1
        self._counters.generated_tokens += num_generated
        self._recent.append((now, num_generated))
        while self._recent and self._recent[0][0] < now - THROUGHPUT_WINDOW_S:
            self._recent.popleft()

    def _snapshot(self) -> EngineStats:
        pool = self._cache.pool
        window = [count for _, count in self._recent]
        span_s = (self._recent[-1][0] - self._recent[0][0]) if len(self._recent) > 1 else 0.0
        return EngineStats(
            alive=self._alive,
            num_waiting=self._scheduler.num_waiting,
            num_running=self._scheduler.num_running,
            num_blocks=pool.num_blocks,
            num_used_blocks=pool.num_used_blocks,
            num_free_blocks=pool.num_free_blocks,
            num_cached_blocks=pool.num_cached_blocks,
            num_evictions=pool.num_evictions,
            num_preemptions=self._scheduler.num_preemptions,
            num_queried_tokens=self._cache.num_queried_tokens,
            num_hit_tokens=self._cache.num_hit_tokens,
            num_prompt_tokens=self._counters.prompt_tokens,
            num_generated_tokens=self._counters.generated_tokens,
            num_finished=self._counters.finished,
            num_aborted=self._counters.aborted,
            num_steps=self._counters.steps,
            generation_tokens_per_s=(sum(window[1:]) / span_s) if span_s > 0 else 0.0,
        )
