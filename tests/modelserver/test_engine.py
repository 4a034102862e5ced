"""The engine on a tiny random model: greedy equality across prefix hits and batching, a soak of
mixed requests that must leave no block behind, the thread, and failure handling."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from modelserver.block_pool import BlockPool
from modelserver.engine import Engine, GenerationOutput, GenerationRequest
from modelserver.errors import ContextLengthExceeded, EngineUnavailable, Overloaded
from modelserver.forward_batch import ForwardBatch
from modelserver.kv_cache import KVCache
from modelserver.prefix_cache import PrefixCache
from modelserver.runtime import Runtime
from modelserver.sampler import SamplingParams
from modelserver.scheduler import FinishReason, Scheduler
from modelserver.weights import LoadedModel
from tests.support.float_tolerance import (
    GreedyRun,
    assert_greedy_agrees,
    logit_tolerance,
    max_logit_bound,
    top_candidates,
)

MakeRuntime = Callable[..., Runtime]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
CPU = torch.device("cpu")


class Collector:
    def __init__(self) -> None:
        self.outputs: dict[str, list[GenerationOutput]] = defaultdict(list)

    def sink(self, output: GenerationOutput) -> None:
        self.outputs[output.request_id].append(output)

    def tokens(self, request_id: str) -> list[int]:
        return [o.token.token_id for o in self.outputs[request_id] if o.token is not None]

    def run(self, request_id: str) -> GreedyRun[int]:
        """The request's tokens, with the alternatives of each where it asked for logprobs."""
        sampled = [o.token for o in self.outputs[request_id] if o.token is not None]
        return GreedyRun([t.token_id for t in sampled], [t.top_logprobs for t in sampled])

    def finish(self, request_id: str) -> FinishReason | None:
        return self.outputs[request_id][-1].finish_reason


def submit(
    engine: Engine,
    collector: Collector,
    request_id: str,
    prompt: list[int],
    sampling: SamplingParams = GREEDY,
    salt: str | None = None,
) -> None:
    engine.submit(GenerationRequest(request_id, tuple(prompt), sampling, salt), collector.sink)


def assert_no_leaks(runtime: Runtime) -> None:
    pool = runtime.block_pool
    assert [b.block_id for b in pool.blocks if b.ref_count != 0] == []
    assert pool.num_free_blocks == pool.num_blocks
    assert sorted(pool.free_order()) == list(range(pool.num_blocks))


def prompt_of(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 259) for _ in range(length)]


def test_greedy_output_equals_hugging_face_generate(
    make_tiny_runtime: MakeRuntime, tiny_model: LoadedModel
) -> None:
    runtime = make_tiny_runtime()
    prompt = prompt_of(1, 21)
    collector = Collector()
    submit(runtime.engine, collector, "a", prompt)
    runtime.engine.run_until_idle()

    arch = tiny_model.weights.arch
    hf = LlamaForCausalLM(LlamaConfig(**arch.to_hf_config())).eval()
    hf.load_state_dict(dict(tiny_model.weights.tensors), strict=False)
    with torch.no_grad():
        generated = hf.generate(
            torch.tensor([prompt]),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )
    step_logits = torch.cat(generated.logits)
    expected = GreedyRun(
        generated.sequences[0, len(prompt) :].tolist(),
        [top_candidates(row) for row in step_logits],
    )
    # Equal up to a near-tie, where float32's rounding in their other sums may break it the
    # other way (tests/support/float_tolerance.py).
    tolerance = logit_tolerance(arch, step_logits.abs().max().item())
    assert_greedy_agrees(GreedyRun(collector.tokens("a")), expected, tolerance)


def test_greedy_output_is_the_same_with_a_prefix_hit_and_in_a_batch(
    make_tiny_runtime: MakeRuntime, tiny_model: LoadedModel
) -> None:
    runtime = make_tiny_runtime()
    engine = runtime.engine
    prompt = prompt_of(2, 30)
    collector = Collector()

    submit(engine, collector, "cold", prompt, replace(GREEDY, logprobs=True, top_logprobs=8))
    engine.run_until_idle()
    submit(engine, collector, "hit", prompt)
    engine.run_until_idle()
    for i in range(5):  # batched with others, some sharing part of the prefix
        submit(engine, collector, f"other-{i}", prompt[: 4 * i] + prompt_of(10 + i, 9))
    submit(engine, collector, "batched", prompt)
    engine.run_until_idle()

    cold = collector.tokens("cold")
    assert len(cold) == GREEDY.max_tokens
    assert collector.outputs["cold"][-1].num_cached_tokens == 0
    assert collector.outputs["hit"][-1].num_cached_tokens == 28  # 7 full blocks of 4
    # A hit and a batch sum over other shapes than the cold run: equal tokens, except where a
    # near-tie lets float32's rounding break it the other way (tests/support/float_tolerance.py).
    tolerance = logit_tolerance(tiny_model.weights.arch, max_logit_bound(tiny_model.weights))
    for request_id in ("hit", "batched"):
        assert_greedy_agrees(collector.run(request_id), collector.run("cold"), tolerance)
    assert_no_leaks(runtime)


def test_seeded_sampling_is_reproducible_and_seeds_differ(make_tiny_runtime: MakeRuntime) -> None:
    runtime = make_tiny_runtime()
    collector = Collector()
    prompt = prompt_of(3, 10)
    for name, seed in (("s1", 1), ("s1-again", 1), ("s2", 2)):
        submit(runtime.engine, collector, name, prompt, SamplingParams(seed=seed, max_tokens=16))
    runtime.engine.run_until_idle()

    assert collector.tokens("s1") == collector.tokens("s1-again")
    assert collector.tokens("s1") != collector.tokens("s2")


def test_logprobs_are_the_log_softmax_of_the_logits(make_tiny_runtime: MakeRuntime) -> None:
    runtime = make_tiny_runtime()
    collector = Collector()
    sampling = SamplingParams(temperature=0.0, max_tokens=3, logprobs=True, top_logprobs=5)
    submit(runtime.engine, collector, "a", prompt_of(4, 8), sampling)
    runtime.engine.run_until_idle()

    for output in collector.outputs["a"]:
        token = output.token
        assert token is not None and token.logprob is not None
        top_ids = [t for t, _ in token.top_logprobs]
        top_values = [lp for _, lp in token.top_logprobs]
        assert len(top_ids) == 5
        assert top_values == sorted(top_values, reverse=True)
        assert top_ids[0] == token.token_id  # greedy picks the most likely token
        assert token.logprob == pytest.approx(top_values[0])
        assert all(lp <= 0 for lp in top_values)


def run_soak(runtime: Runtime, num_requests: int, seed: int) -> Collector:
    """Mixed requests with shared prefixes, salts, sampling, early aborts, in waves, on a pool
    small enough to force evictions and preemptions."""
    rng = random.Random(seed)
    engine = runtime.engine
    collector = Collector()
    prefixes = [prompt_of(100 + i, rng.randrange(4, 40)) for i in range(6)]
    aborted: set[str] = set()
    live: list[str] = []
    submitted = 0
    while submitted < num_requests or live:
        for _ in range(rng.randrange(0, 6)):
            if submitted == num_requests:
                break
            request_id = f"r{submitted}"
            prompt = rng.choice(prefixes) + prompt_of(rng.randrange(10**6), rng.randrange(1, 20))
            sampling = SamplingParams(
                temperature=rng.choice([0.0, 0.8]), max_tokens=rng.randrange(1, 24), seed=submitted
            )
            submit(engine, collector, request_id, prompt, sampling, rng.choice([None, "x", "y"]))
            live.append(request_id)
            submitted += 1
        for request_id in list(live):
            if rng.random() < 0.03:
                engine.abort(request_id)
                aborted.add(request_id)
        engine.run_until_idle() if rng.random() < 0.05 else _steps(engine, rng.randrange(1, 4))
        live = [r for r in live if r not in aborted and not _finished(collector, r)]
    engine.run_until_idle()
    for request_id in (f"r{i}" for i in range(num_requests)):
        if request_id not in aborted:
            assert collector.finish(request_id) in (FinishReason.STOP, FinishReason.LENGTH)
    return collector


def _steps(engine: Engine, count: int) -> None:
    for _ in range(count):
        engine.step()


def _finished(collector: Collector, request_id: str) -> bool:
    outputs = collector.outputs.get(request_id)
    return bool(outputs) and outputs[-1].finish_reason is not None


def test_hundreds_of_mixed_requests_leave_no_block_behind(make_tiny_runtime: MakeRuntime) -> None:
    runtime = make_tiny_runtime(kv_cache_blocks=40, max_num_seqs=6, max_batch_tokens=48)

    run_soak(runtime, num_requests=300, seed=7)

    assert_no_leaks(runtime)
    stats = runtime.engine.stats()
    assert stats.num_evictions > 0, "the soak should exercise eviction"
    assert stats.num_preemptions > 0, "the soak should exercise preemption"
    assert stats.num_hit_tokens > 0, "the soak should exercise prefix hits"
    assert stats.num_aborted > 0
    assert stats.num_finished + stats.num_aborted == 300
    assert (stats.num_running, stats.num_waiting) == (0, 0)


@pytest.mark.slow
def test_thousands_of_mixed_requests_leave_no_block_behind(make_tiny_runtime: MakeRuntime) -> None:
    runtime = make_tiny_runtime(kv_cache_blocks=48, max_num_seqs=8, max_batch_tokens=64)
    run_soak(runtime, num_requests=3000, seed=8)
    assert_no_leaks(runtime)


def test_requests_that_cannot_fit_or_overflow_the_queue_are_refused(
    make_tiny_runtime: MakeRuntime,
) -> None:
    runtime = make_tiny_runtime(max_num_seqs=1, max_waiting_requests=1)
    engine = runtime.engine
    collector = Collector()
    with pytest.raises(ContextLengthExceeded, match="maximum context length is 256"):
        submit(engine, collector, "long", [5] * 250, SamplingParams(max_tokens=10))

    submit(engine, collector, "a", [5, 6])
    submit(engine, collector, "b", [5, 6])
    with pytest.raises(Overloaded):
        submit(engine, collector, "c", [5, 6])
    engine.run_until_idle()
    submit(engine, collector, "c", [5, 6])  # room again once the others finished


def test_the_thread_serves_and_stopping_fails_what_is_left(make_tiny_runtime: MakeRuntime) -> None:
    runtime = make_tiny_runtime()
    engine = runtime.engine
    done = threading.Event()
    collector = Collector()

    def sink(output: GenerationOutput) -> None:
        collector.sink(output)
        if output.finish_reason is not None:
            done.set()

    engine.start()
    engine.submit(GenerationRequest("a", (5, 6, 7), GREEDY), sink)
    assert done.wait(10)
    engine.submit(
        GenerationRequest("endless", (5,), SamplingParams(max_tokens=200)), collector.sink
    )
    engine.stop()

    assert len(collector.tokens("a")) == GREEDY.max_tokens
    last = collector.outputs["endless"][-1]
    assert isinstance(last.error, EngineUnavailable)
    assert not engine.stats().alive
    with pytest.raises(EngineUnavailable):
        engine.submit(GenerationRequest("late", (5,), GREEDY), collector.sink)
    assert_no_leaks(runtime)


class BrokenModel:
    """A model whose forward fails, as a CUDA error or a bug would."""

    def forward(self, batch: ForwardBatch, kv: KVCache) -> torch.Tensor:
        raise RuntimeError("device lost")


def test_a_failed_step_fails_every_request_and_stops_the_engine(
    tiny_model: LoadedModel,
) -> None:
    arch = tiny_model.weights.arch
    cache = PrefixCache(BlockPool(8), block_size=4)
    engine = Engine(
        BrokenModel(),
        KVCache.allocate(arch, num_blocks=8, block_size=4, dtype=torch.float32, device=CPU),
        cache,
        Scheduler(cache, max_num_seqs=4, max_batch_tokens=32, max_model_len=32),
        max_model_len=32,
        max_live_requests=8,
        seed_source=lambda: 0,
        clock=lambda: 0.0,
    )
    finished = threading.Event()
    collector = Collector()

    def sink(output: GenerationOutput) -> None:
        collector.sink(output)
        finished.set()

    engine.start()
    engine.submit(GenerationRequest("a", (5, 6), GREEDY), sink)
    assert finished.wait(10)
    engine.stop()

    error = collector.outputs["a"][-1].error
    assert isinstance(error, EngineUnavailable)
    assert "failed" in error.message
    assert not engine.stats().alive
    assert cache.pool.num_free_blocks == 8
