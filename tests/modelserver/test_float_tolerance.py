"""The float32 tolerance and the near-tie rule every cross-path model test relies on."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from modelserver.arch import PRESETS
from modelserver.forward_batch import SequenceChunk, build_forward_batch
from modelserver.kv_cache import KVCache
from modelserver.model import LlamaModel
from modelserver.weights import LoadedModel
from tests.support.float_tolerance import (
    Agreement,
    GreedyRun,
    assert_greedy_agrees,
    assert_logits_close,
    assert_logprobs_close,
    logit_tolerance,
    max_logit_bound,
    near_ties,
)

TOL = 1e-3
STOP = -1  # a stop token: not listed in the runs


def test_the_bound_is_float32s_over_the_sums_and_the_layers() -> None:
    smollm2, tiny = PRESETS["smollm2-135m"], PRESETS["tiny"]
    # 4 · 2⁻²⁴ · √1536 · 30 layers, at logits of magnitude 23 (a 3-token SmolLM2 prompt).
    assert logit_tolerance(smollm2, 23.0) == pytest.approx(4 * 2**-24 * math.sqrt(1536) * 30 * 23)
    assert logit_tolerance(smollm2, 23.0) == pytest.approx(6.45e-3, rel=1e-3)
    # Random-weight logits below 1 are not given a bound below float32's at scale 1.
    assert logit_tolerance(tiny, 0.2) == logit_tolerance(tiny, 1.0)


def tiny_logits(model: LoadedModel, eps: float, token_ids: list[int]) -> torch.Tensor:
    arch = dataclasses.replace(model.weights.arch, rms_norm_eps=eps)
    ours = LlamaModel(
        arch,
        model.weights.tensors,
        device=torch.device("cpu"),
        dtype=torch.float32,
        max_positions=64,
    )
    kv = KVCache.allocate(arch, num_blocks=4, block_size=4, dtype=torch.float32, device=ours.device)
    chunk = SequenceChunk(tuple(token_ids), 0, tuple(range(4)), True)
    return ours.forward(build_forward_batch([chunk], block_size=4, device=ours.device), kv)[0]


def test_a_subtle_defect_is_far_outside_the_bound(tiny_model: LoadedModel) -> None:
    token_ids = [5, 77, 140, 3, 250, 9, 11]
    arch = tiny_model.weights.arch
    right = tiny_logits(tiny_model, arch.rms_norm_eps, token_ids)

    with pytest.raises(AssertionError, match=r"max \|Δlogit\|"):
        # RMSNorm's epsilon read as 1e-6 instead of 1e-5.
        assert_logits_close(arch, tiny_logits(tiny_model, 1e-6, token_ids), right)


def test_the_weight_bound_holds_every_logit(tiny_model: LoadedModel) -> None:
    arch, tensors = tiny_model.weights.arch, tiny_model.weights.tensors
    reference = LlamaForCausalLM(LlamaConfig(**arch.to_hf_config())).eval()
    reference.load_state_dict(dict(tensors), strict=False)
    prompts = torch.randint(0, arch.vocab_size, (8, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = reference(prompts).logits

    bound = max_logit_bound(tiny_model.weights)
    assert logits.abs().max().item() <= bound < 2 * logits.abs().max().item()


def test_runs_that_agree_throughout_are_identical() -> None:
    expected = GreedyRun(
        [1, 2, 3], [[(1, 9.0), (4, 1.0)], [(2, 9.0), (4, 1.0)], [(3, 9.0), (4, 1.0)]]
    )

    assert assert_greedy_agrees(GreedyRun([1, 2, 3]), expected, TOL) == Agreement(3, True)
    with pytest.raises(AssertionError, match="token 3"):
        assert_greedy_agrees(GreedyRun([1, 2, 3, 4]), expected, TOL)


def test_a_near_tie_may_break_either_way_and_ends_the_comparison() -> None:
    # At step 1 the reference's best two are 1.5·TOL apart: within 2·TOL, so either may win.
    expected = GreedyRun(
        [1, 2, 3],
        [[(1, 9.0), (4, 1.0)], [(2, 5.0), (7, 5.0 - 1.5 * TOL), (4, 1.0)], [(3, 9.0), (4, 1.0)]],
    )

    agreement = assert_greedy_agrees(GreedyRun([1, 7, 9, 9]), expected, TOL)

    assert agreement == Agreement(1, identical=False)


def test_a_clear_choice_must_agree() -> None:
    expected = GreedyRun([1, 2], [[(1, 9.0), (4, 1.0)], [(2, 5.0), (7, 5.0 - 3 * TOL)]])

    with pytest.raises(AssertionError, match="token 1: 7 where the reference chose 2"):
        assert_greedy_agrees(GreedyRun([1, 7]), expected, TOL)


def test_the_reference_must_have_chosen_its_best_candidate() -> None:
    expected = GreedyRun([2], [[(1, 9.0), (2, 5.0)]])

    with pytest.raises(AssertionError, match="not its best candidate"):
        assert_greedy_agrees(GreedyRun([2]), expected, TOL)


def test_stopping_where_the_other_went_on_needs_a_near_tie_with_the_stop_token() -> None:
    # Stop tokens are not listed (OpenAI logprobs): the run that went on shows the choice.
    went_on = GreedyRun([1, 2], [[(1, 9.0), (4, 1.0)], [(2, 5.0), (STOP, 5.0 - TOL), (4, 1.0)]])
    stopped = GreedyRun([1], [[(1, 9.0), (4, 1.0)]])
    clearly = GreedyRun([1, 2], [[(1, 9.0), (4, 1.0)], [(2, 5.0), (STOP, 4.0), (4, 1.0)]])

    assert assert_greedy_agrees(stopped, went_on, TOL, stop_tokens={STOP}) == Agreement(1, False)
    assert assert_greedy_agrees(went_on, stopped, TOL, stop_tokens={STOP}) == Agreement(1, False)
    with pytest.raises(AssertionError, match="one path stopped"):
        assert_greedy_agrees(stopped, clearly, TOL, stop_tokens={STOP})


def test_near_ties_must_be_known_in_full() -> None:
    assert near_ties([(1, 5.0), (2, 5.0 - TOL), (3, 1.0)], TOL) == {1, 2}
    with pytest.raises(AssertionError, match="ask for more"):
        near_ties([(1, 5.0), (2, 5.0 - TOL)], TOL)


def test_logprobs_agree_within_twice_the_tolerance_and_may_swap_at_the_cut_off() -> None:
    expected = [(1, -1.0), (2, -2.0), (3, -3.0)]

    assert_logprobs_close([(1, -1.0 + 1.5 * TOL), (2, -2.0), (3, -3.0)], expected, TOL)
    # Token 3 and 9 sat within 2·TOL at the cut-off: either may make the list.
    assert_logprobs_close([(1, -1.0), (2, -2.0), (9, -3.0 + TOL)], expected, TOL)
    with pytest.raises(AssertionError, match="1: "):
        assert_logprobs_close([(1, -1.0 + 3 * TOL), (2, -2.0), (3, -3.0)], expected, TOL)
    with pytest.raises(AssertionError, match="9: "):
        assert_logprobs_close([(1, -1.0), (2, -2.0), (9, -2.5)], expected, TOL)
