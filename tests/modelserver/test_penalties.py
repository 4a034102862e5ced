"""Repetition, presence and frequency penalties: the arithmetic on small tensors, batch rows kept
apart, the sampler's use of them, and the engine's greedy tokens against references."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, RepetitionPenaltyLogitsProcessor

from modelserver.engine import GenerationRequest
from modelserver.penalties import TokenHistory, apply_penalties
from modelserver.runtime import Runtime
from modelserver.sampler import SamplingParams, make_generator, sample
from modelserver.weights import LoadedModel
from tests.modelserver.test_engine import Collector, prompt_of, submit

MakeRuntime = Callable[..., Runtime]


def history(prompt: list[int], generated: list[int]) -> TokenHistory:
    tokens = TokenHistory(prompt, max_tokens=len(generated) + 1)
    for token_id in generated:
        tokens.append(token_id)
    return tokens


def test_each_penalty_follows_its_definition_exactly() -> None:
    # Powers of two, so every expected value is exact in float32.
    logits = torch.tensor([[4.0, -2.0, 1.0, 3.0, 0.5, 0.0]])
    tokens = history(prompt=[0, 5], generated=[1, 3, 3])
    params = SamplingParams(repetition_penalty=2.0, presence_penalty=0.25, frequency_penalty=0.5)

    out = apply_penalties(logits, [params], [tokens])

    # 0, 5: in the prompt only, untouched (an answer may use the question's words). 1: generated
    # once, negative: *2, then -0.5*1 - 0.25. 2, 4: never seen. 3: generated twice:
    # 3/2 - 0.5*2 - 0.25.
    assert out.tolist() == [[4.0, -4.75, 1.0, 0.25, 0.5, 0.0]]


def test_presence_and_frequency_count_generated_tokens_only() -> None:
    logits = torch.tensor([[1.0, 1.0, 1.0]])
    tokens = history(prompt=[0, 0, 0], generated=[2])
    params = SamplingParams(presence_penalty=-0.5, frequency_penalty=1.0)

    out = apply_penalties(logits, [params], [tokens])

    # Negative penalties raise a token, as OpenAI allows (-2..2); the prompt's 0s count nothing.
    assert out.tolist() == [[1.0, 1.0, 0.5]]


def test_the_repetition_penalty_equals_hugging_faces_processor_over_the_completion() -> None:
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(1, 97, generator=generator) * 4
    ids = torch.randint(0, 97, (1, 40), generator=generator)
    tokens = history(prompt=ids[0, :25].tolist(), generated=ids[0, 25:].tolist())

    ours = apply_penalties(logits, [SamplingParams(repetition_penalty=1.1)], [tokens])
    # Hugging Face's processor penalises whatever ids it is given: here, the completion's.
    theirs = RepetitionPenaltyLogitsProcessor(1.1)(ids[:, 25:], logits.clone())

    assert torch.equal(ours, theirs)


def test_rows_of_one_batch_keep_their_own_penalties_and_histories() -> None:
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 50, generator=generator)
    params = [
        SamplingParams(repetition_penalty=1.5, frequency_penalty=0.3),
        SamplingParams(),  # neutral: its row must come back untouched
        SamplingParams(presence_penalty=1.0),
    ]
    # Different lengths: the shorter rows are padded, and padding must count nothing.
    histories = [history([1, 2, 3, 4, 5, 6], [7, 7, 8]), history([9], []), history([0], [0, 11])]

    batched = apply_penalties(logits, params, histories)

    for row in range(3):
        alone = apply_penalties(logits[row : row + 1], [params[row]], [histories[row]])
        if row == 1:
            alone = logits[row : row + 1]
        assert torch.equal(batched[row : row + 1], alone), f"row {row}"
    assert torch.equal(batched[1], logits[1])
    assert batched[2, 0] == logits[2, 0] - 1.0  # a padded 0 would not have counted it twice


def test_without_penalties_the_logits_are_returned_as_they_are() -> None:
    logits = torch.randn(2, 10)
    out = apply_penalties(logits, [SamplingParams(), SamplingParams()], [history([1], [2])] * 2)
    assert out is logits


def test_greedy_sampling_with_a_penalty_is_deterministic_and_reports_raw_logprobs() -> None:
    # Token 0 leads, but it was just generated: a repetition penalty of 2 halves it below token 1.
    logits = torch.tensor([[3.0, 2.0, -1.0]])
    greedy = SamplingParams(temperature=0.0, repetition_penalty=2.0, logprobs=True)
    tokens = history([2], [0])

    picks = [
        sample(logits, [greedy], [make_generator(greedy, seed)], [tokens])[0] for seed in range(5)
    ]

    assert {p.token_id for p in picks} == {1}
    raw = torch.log_softmax(logits[0], dim=-1)
    assert picks[0].logprob == pytest.approx(float(raw[1]), abs=1e-6)


# Our logits match transformers' within ~1e-5 on the tiny model, whose logits are of order 1
# (test_model.py); a greedy choice is compared only where the reference's top two penalised
# logits are further apart than this, since a closer pair may break either way on another CPU.
MARGIN = 1e-3
STEPS = 14


def hugging_face_model(tiny_model: LoadedModel) -> LlamaForCausalLM:
    arch = tiny_model.weights.arch
    model = LlamaForCausalLM(LlamaConfig(**arch.to_hf_config())).eval()
    model.load_state_dict(dict(tiny_model.weights.tensors), strict=False)
    return model


Penalise = Callable[[torch.Tensor, list[int]], torch.Tensor]


def reference_greedy(
    model: LlamaForCausalLM, prompt: list[int], penalise: Penalise
) -> tuple[list[int], int]:
    """Greedy tokens recomputing the whole sequence each step, and how many of them are safe to
    compare: those before the first step whose top-two margin is under MARGIN (that choice may
    go either way, and everything after it follows from it)."""
    sequence, comparable = list(prompt), None
    with torch.no_grad():
        for step in range(STEPS):
            logits = penalise(model(torch.tensor([sequence])).logits[0, -1], sequence)
            top = logits.topk(2).values
            if comparable is None and float(top[0] - top[1]) < MARGIN:
                comparable = step
            sequence.append(int(logits.argmax()))
    return sequence[len(prompt) :], STEPS if comparable is None else comparable


def run_alone(runtime: Runtime, prompt: list[int], sampling: SamplingParams) -> list[int]:
    collector = Collector()
    submit(runtime.engine, collector, "alone", prompt, sampling)
    runtime.engine.run_until_idle()
    return collector.tokens("alone")


def test_engine_greedy_with_repetition_penalty_equals_hugging_faces(
    make_tiny_runtime: MakeRuntime, tiny_model: LoadedModel
) -> None:
    prompt = prompt_of(21, 17)
    sampling = SamplingParams(temperature=0.0, max_tokens=STEPS, repetition_penalty=1.3)
    ours = run_alone(make_tiny_runtime(), prompt, sampling)

    processor = RepetitionPenaltyLogitsProcessor(1.3)
    expected, comparable = reference_greedy(
        hugging_face_model(tiny_model),
        prompt,
        lambda logits, sequence: (
            processor(torch.tensor([sequence[len(prompt) :]]), logits[None].clone())[0]
            if len(sequence) > len(prompt)
            else logits
        ),
    )
    assert comparable >= 10, "the prompt should give clear choices"
    assert ours[:comparable] == expected[:comparable]
    assert len(ours) == STEPS


def test_engine_greedy_with_openai_penalties_equals_a_step_by_step_reference(
    make_tiny_runtime: MakeRuntime, tiny_model: LoadedModel
) -> None:
    prompt = prompt_of(22, 12)
    sampling = SamplingParams(
        temperature=0.0, max_tokens=STEPS, presence_penalty=0.8, frequency_penalty=0.6
    )
    ours = run_alone(make_tiny_runtime(), prompt, sampling)

    def penalise(logits: torch.Tensor, sequence: list[int]) -> torch.Tensor:
        out = logits.clone()
        for token_id, count in Counter(sequence[len(prompt) :]).items():
            out[token_id] -= 0.6 * count + 0.8
        return out

    expected, comparable = reference_greedy(hugging_face_model(tiny_model), prompt, penalise)
    assert comparable >= 10, "the prompt should give clear choices"
    assert ours[:comparable] == expected[:comparable]
    # Penalised, the tiny model's answer is not the plain greedy one.
    assert ours != run_alone(
        make_tiny_runtime(), prompt, SamplingParams(temperature=0.0, max_tokens=STEPS)
    )


def test_penalised_tokens_are_the_same_batched_and_preempted(
    make_tiny_runtime: MakeRuntime,
) -> None:
    sampling = SamplingParams(
        temperature=0.0, max_tokens=12, repetition_penalty=1.4, frequency_penalty=0.5
    )
    prompts = {f"r{i}": prompt_of(30 + i, 10) for i in range(4)}
    alone = {name: run_alone(make_tiny_runtime(), p, sampling) for name, p in prompts.items()}

    # 4 sequences of 22 tokens need 24 blocks of 4; the pool has 12, so some are preempted
    # and resume from their generated tokens, which their penalties must still count.
    runtime = make_tiny_runtime(kv_cache_blocks=12, max_num_seqs=4)
    collector = Collector()
    for name, prompt in prompts.items():
        runtime.engine.submit(GenerationRequest(name, tuple(prompt), sampling), collector.sink)
    runtime.engine.run_until_idle()

    assert runtime.engine.stats().num_preemptions > 0
    assert {name: collector.tokens(name) for name in prompts} == alone


def test_a_history_holds_prompt_then_generated_ids() -> None:
    tokens = TokenHistory([4, 5], max_tokens=2)
    tokens.append(6)
    assert tokens.token_ids.tolist() == [4, 5, 6]
    assert (tokens.num_prompt_tokens, tokens.length) == (2, 3)
