"""Our paged forward against Hugging Face's LlamaForCausalLM, on tiny random-weight models."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from modelserver.arch import PRESETS, LlamaArch, RopeScaling
from modelserver.forward_batch import SequenceChunk, build_forward_batch, order_chunks
from modelserver.kv_cache import KVCache
from modelserver.model import LlamaModel
from modelserver.weights import random_weights
from tests.support.float_tolerance import assert_logits_close

CPU = torch.device("cpu")


def reference(arch: LlamaArch, tensors: Mapping[str, torch.Tensor]) -> LlamaForCausalLM:
    model = LlamaForCausalLM(LlamaConfig(**arch.to_hf_config())).eval()
    missing, unexpected = model.load_state_dict(dict(tensors), strict=False)
    assert not unexpected
    assert set(missing) <= {"lm_head.weight"}, "only a tied head may be missing"
    return model


def reference_logits(model: LlamaForCausalLM, token_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0]


class Harness:
    """Our model with a 64-block pool of 4-token blocks, sequences placed by hand."""

    def __init__(self, arch: LlamaArch, tensors: Mapping[str, torch.Tensor]) -> None:
        self.model = LlamaModel(arch, tensors, device=CPU, dtype=torch.float32, max_positions=256)
        self.kv = KVCache.allocate(
            arch, num_blocks=64, block_size=4, dtype=torch.float32, device=CPU
        )

    def run(self, chunks: list[SequenceChunk]) -> list[torch.Tensor]:
        """Logits rows of `chunks` (each wants logits), in the order given."""
        order = order_chunks(chunks)
        batch = build_forward_batch([chunks[i] for i in order], block_size=4, device=CPU)
        rows = self.model.forward(batch, self.kv)
        by_chunk = dict(zip(order, rows, strict=True))
        return [by_chunk[i] for i in range(len(chunks))]


def chunk(tokens: list[int], start: int, blocks: range) -> SequenceChunk:
    return SequenceChunk(tuple(tokens[start:]), start, tuple(blocks), wants_logits=True)


@pytest.fixture(scope="module")
def tiny() -> tuple[LlamaArch, Mapping[str, torch.Tensor]]:
    arch = PRESETS["tiny"]
    return arch, random_weights(arch, seed=3).tensors


def test_full_prefill_matches_the_reference(
    tiny: tuple[LlamaArch, Mapping[str, torch.Tensor]],
) -> None:
    arch, tensors = tiny
    tokens = torch.randint(0, arch.vocab_size, (37,), generator=torch.Generator().manual_seed(1))
    ids = tokens.tolist()

    ours = Harness(arch, tensors).run([chunk(ids, 0, range(10))])[0]

    expected = reference_logits(reference(arch, tensors), ids)[-1]
    assert_logits_close(arch, ours, expected)


def test_chunked_prefill_and_decode_match_the_reference_at_every_step(
    tiny: tuple[LlamaArch, Mapping[str, torch.Tensor]],
) -> None:
    arch, tensors = tiny
    ids = torch.randint(0, arch.vocab_size, (30,), generator=torch.Generator().manual_seed(2))
    ids_list = ids.tolist()
    expected = reference_logits(reference(arch, tensors), ids_list)
    harness = Harness(arch, tensors)
    blocks = range(20, 28)  # not starting at block 0, and not the first sequence's blocks

    for end in (9, 22, 23, 30):  # a first chunk, a middle chunk, a decode, a last chunk
        start = {9: 0, 22: 9, 23: 22, 30: 23}[end]
        row = harness.run([SequenceChunk(tuple(ids_list[start:end]), start, tuple(blocks), True)])[
            0
        ]
        assert_logits_close(arch, row, expected[end - 1], f"at token {end}: ")


def test_a_batch_of_decodes_and_prefills_matches_each_sequence_alone(
    tiny: tuple[LlamaArch, Mapping[str, torch.Tensor]],
) -> None:
    arch, tensors = tiny
    generator = torch.Generator().manual_seed(4)
    prompts = [
        torch.randint(0, arch.vocab_size, (n,), generator=generator).tolist()
        for n in (5, 13, 2, 17)
    ]
    hf = reference(arch, tensors)
    harness = Harness(arch, tensors)
    tables = [range(0, 6), range(10, 16), range(20, 26), range(30, 36)]
    # Sequences 0 and 1 have their prompts but the last token cached; 2 and 3 start cold.
    harness.run([chunk(prompts[0][:-1], 0, tables[0]), chunk(prompts[1][:-1], 0, tables[1])])

    rows = harness.run(
        [
            chunk(prompts[2], 0, tables[2]),
            chunk(prompts[0], len(prompts[0]) - 1, tables[0]),  # a decode
            chunk(prompts[3], 0, tables[3]),
            chunk(prompts[1], len(prompts[1]) - 1, tables[1]),  # a decode
        ]
    )

    for row, prompt in zip(rows, [prompts[2], prompts[0], prompts[3], prompts[1]], strict=True):
        assert_logits_close(arch, row, reference_logits(hf, prompt)[-1])


@pytest.mark.parametrize(
    "variant",
    [
        {"rope_scaling": RopeScaling("llama3", factor=8.0, original_max_position_embeddings=16)},
        {"rope_scaling": RopeScaling("linear", factor=2.0)},
        {"tie_word_embeddings": False},
        {"num_kv_heads": 6},  # plain multi-head attention
    ],
    ids=["llama3-rope", "linear-rope", "untied-head", "mha"],
)
def test_architecture_variants_match_the_reference(variant: dict[str, object]) -> None:
    arch = dataclasses.replace(PRESETS["tiny"], **variant)  # type: ignore[arg-type]
    tensors = random_weights(arch, seed=5).tensors
    ids = torch.randint(
        0, arch.vocab_size, (40,), generator=torch.Generator().manual_seed(6)
    ).tolist()

    harness = Harness(arch, tensors)
    harness.run([chunk(ids[:25], 0, range(10))])
    row = harness.run([chunk(ids, 25, range(10))])[0]

    expected = reference_logits(reference(arch, tensors), ids)[-1]
    assert_logits_close(arch, row, expected)


def test_arch_round_trips_through_a_hugging_face_config() -> None:
    arch = dataclasses.replace(PRESETS["tiny"], rope_scaling=RopeScaling("llama3", factor=8.0))
    assert LlamaArch.from_hf_config(arch.to_hf_config()) == arch


def test_transformers_5_rope_parameters_are_read() -> None:
    config = PRESETS["smollm2-135m"].to_hf_config()
    del config["rope_theta"]
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 100000.0}

    assert LlamaArch.from_hf_config(config) == PRESETS["smollm2-135m"]
