"""Real SmolLM2-135M-Instruct weights against Hugging Face transformers loading the same GGUF.

Marked `modelserver` (not slow): together about a minute here, most of it transformers'
dequantization of the GGUF for the reference model, done once per session.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerBase

from modelserver.config import ModelServerConfig
from modelserver.engine import GenerationOutput, GenerationRequest
from modelserver.forward_batch import SequenceChunk, build_forward_batch
from modelserver.kv_cache import KVCache
from modelserver.model import LlamaModel
from modelserver.runtime import build_runtime
from modelserver.sampler import SamplingParams
from modelserver.tokenizer import ChatMessage
from modelserver.weights import LoadedModel, load_model, smollm2_gguf_path
from tests.modelserver.conftest import model_cache_dir
from tests.support.float_tolerance import (
    GreedyRun,
    assert_greedy_agrees,
    assert_logits_close,
    logit_tolerance,
    top_candidates,
)

pytestmark = pytest.mark.modelserver

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def reference() -> LlamaForCausalLM:
    path = smollm2_gguf_path()
    model = LlamaForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="module")
def reference_tokenizer() -> PreTrainedTokenizerBase:
    path = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def all_position_logits(model: LlamaModel, token_ids: list[int]) -> torch.Tensor:
    """Our logits at every position of one prefill (the server computes only the last row)."""
    blocks = tuple(range(-(-len(token_ids) // 16)))
    kv = KVCache.allocate(
        model.arch, num_blocks=len(blocks), block_size=16, dtype=torch.float32, device=CPU
    )
    batch = build_forward_batch(
        [SequenceChunk(tuple(token_ids), 0, blocks, True)], block_size=16, device=CPU
    )
    every_row = dataclasses.replace(batch, logits_indices=torch.arange(len(token_ids)))
    return model.forward(every_row, kv)


def test_logits_equal_transformers_on_random_prompts(
    smollm2: LoadedModel, reference: LlamaForCausalLM
) -> None:
    arch = smollm2.weights.arch
    ours = LlamaModel(
        arch, smollm2.weights.tensors, device=CPU, dtype=torch.float32, max_positions=512
    )
    generator = torch.Generator().manual_seed(0)
    for length in (512, 57, 3):
        token_ids = torch.randint(0, arch.vocab_size, (length,), generator=generator).tolist()
        with torch.no_grad():
            expected = reference(torch.tensor([token_ids])).logits[0]

        # Not bit for bit: transformers and we sum in other orders (other CPUs in others
        # still); the bound is float32's over 30 layers of 1536-term sums, at the logits' scale.
        assert_logits_close(arch, all_position_logits(ours, token_ids), expected, f"{length}: ")


def test_greedy_answers_are_identical_cold_cached_batched_and_in_transformers(
    smollm2: LoadedModel, reference: LlamaForCausalLM
) -> None:
    config = ModelServerConfig(kv_cache_mib=64, max_batch_tokens=64, warmup=False)
    runtime = build_runtime(config, loaded=smollm2)
    tokenizer, engine = runtime.tokenizer, runtime.engine
    prompt = tokenizer.encode(
        tokenizer.render_chat(
            [ChatMessage("user", "Write a short poem about the sea and its colours.")]
        ),
        add_special_tokens=False,
    )
    others = [
        tokenizer.encode(
            tokenizer.render_chat([ChatMessage("user", question)]), add_special_tokens=False
        )
        for question in ("What is 2 + 2?", "Name three fruits.", "Why is the sky blue?")
    ]
    outputs: dict[str, list[GenerationOutput]] = defaultdict(list)
    greedy = SamplingParams(temperature=0.0, max_tokens=24)

    def run(request_id: str, token_ids: list[int]) -> None:
        engine.submit(
            GenerationRequest(request_id, tuple(token_ids), greedy),
            lambda o: outputs[o.request_id].append(o),
        )

    run("cold", prompt)
    engine.run_until_idle()
    run("cached", prompt)
    engine.run_until_idle()
    for index, other in enumerate(others):
        run(f"other-{index}", other)
    run("batched", prompt)  # admitted with the others, its prompt chunked across steps
    engine.run_until_idle()

    def tokens(request_id: str) -> GreedyRun[int]:
        return GreedyRun([o.token.token_id for o in outputs[request_id] if o.token is not None])

    with torch.no_grad():
        generated = reference.generate(
            torch.tensor([prompt]),
            max_new_tokens=24,
            do_sample=False,
            pad_token_id=2,
            output_logits=True,
            return_dict_in_generate=True,
        )
    step_logits = torch.cat(generated.logits)
    expected = GreedyRun(
        generated.sequences[0, len(prompt) :].tolist(),
        [top_candidates(row) for row in step_logits],
    )
    # Cold, cached and batched runs sum over other shapes than transformers: their tokens are
    # the same except where two candidates are within float32's error of each other.
    tolerance = logit_tolerance(smollm2.weights.arch, step_logits.abs().max().item())
    assert outputs["cached"][-1].num_cached_tokens == (len(prompt) - 1) // 16 * 16 > 0
    for request_id in ("cold", "cached", "batched"):
        assert_greedy_agrees(tokens(request_id), expected, tolerance)
    assert all(block.ref_count == 0 for block in runtime.block_pool.blocks)


@pytest.mark.parametrize(
    "text",
    [
        "Hello world, how are you?",
        "naïve café — ünïcode ✓ 日本語",
        "x = 12345 + 67.5e-3",
        "  leading spaces\n\nnewlines\ttabs   ",
        "<|im_start|>user\nspecial tokens stay whole<|im_end|>",
        "def f(a, b):\n    return a ** b  # code",
    ],
)
def test_token_ids_equal_transformers(
    smollm2: LoadedModel, reference_tokenizer: PreTrainedTokenizerBase, text: str
) -> None:
    ours = smollm2.tokenizer.encode(text, add_special_tokens=False)

    assert ours == reference_tokenizer.encode(text, add_special_tokens=False)
    assert smollm2.tokenizer.decode(ours) == reference_tokenizer.decode(
        ours, skip_special_tokens=True
    )


def test_chat_template_renders_as_transformers(
    smollm2: LoadedModel, reference_tokenizer: PreTrainedTokenizerBase
) -> None:
    conversations = [
        [{"role": "user", "content": "Hi"}],
        [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye"},
        ],
    ]
    for messages in conversations:
        ours = smollm2.tokenizer.render_chat(
            [ChatMessage(m["role"], m["content"]) for m in messages]
        )
        expected = reference_tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        assert ours == expected


def test_the_end_of_turn_token_stops_generation(smollm2: LoadedModel) -> None:
    assert smollm2.tokenizer.stop_token_ids == frozenset({2})  # <|im_end|>
    assert smollm2.tokenizer.token_text(2) == "<|im_end|>"


def test_a_converted_gguf_loads_in_under_a_second(smollm2: LoadedModel) -> None:
    started = time.monotonic()
    loaded = load_model("smollm2", cache_dir=model_cache_dir())
    elapsed_s = time.monotonic() - started

    assert elapsed_s < 1.0
    assert loaded.weights.arch == smollm2.weights.arch
