"""How far two correct float32 runs of one network may differ, and which greedy choices that fixes.

Two code paths computing the same model (ours and transformers', a prefill and a decode, one batch
shape and another, ATen's AVX2 or default kernels, one thread or two, another CPU's MKL path) add
the same products in other orders: another SIMD width, matmul blocking, split between threads, FMA
or not. Each order rounds differently, so their floats agree only within a bound. It is derived
here, once, for every test that compares model floats across two paths:

    tol = K · u · √n · L · S        u = 2⁻²⁴ (float32 unit roundoff), K = 4

- √n·u: a float32 dot product of n terms errs by about √n·u times Σ|aᵢbᵢ| when its roundings
  behave as independent random signs, as they do in practice (Higham & Mary, "A new approach to
  probabilistic rounding error analysis", SIAM J. Sci. Comput. 2019); the worst case, n·u, is
  never approached. n is the longest sum of a layer, max(hidden size, intermediate size).
- L, the layer count: every layer adds its products' rounding to the residual stream and carries
  the earlier layers' on (the norms keep the stream's relative error from compounding), so the
  relative error grows at most linearly with depth.
- S = max(1, max|output|): the head is one more product, which turns the final state's relative
  error into the same relative error of the logits. The floor of 1 is for random-weight models,
  whose logits stay below 1 while the sums inside them are not smaller.
- K = 4: each of the two paths rounds (2), and each layer has two sub-blocks, attention and MLP,
  each adding a full-length projection into the residual stream (2).

Measured, not tuned: on an AMD EPYC (Zen 3), under ATEN_CPU_CAPABILITY=default and avx2, 1 and 2
threads, MKL_CBWR unset and COMPATIBLE, |Δlogit| of SmolLM2-135M against transformers was at
most 1.6e-4 (tol 6.4e-3 to 9.4e-3 by the prompt's S; closest 1.45e-4 on a 3-token prompt with
S = 23), and of the tiny preset between a whole prefill and a prefill plus decodes at most 3.6e-7
(S = 1.2: tol = 5.6e-6). That is up to 0.09 and 0.26 of u·√n·L·S: K leaves a margin of 45x and
15x for other CPUs, while a real defect lands far outside it (test_float_tolerance.py).

What follows from tol:
- logprobs = logits − logsumexp(logits), and logsumexp moves by at most max|Δlogit|, so two paths'
  logprobs agree within 2·tol (so do their k-th largest values);
- a greedy choice can flip only where the two best logits are within 2·tol of each other (a
  near-tie); everywhere else it is exact, and tests compare tokens exactly up to a near-tie.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from modelserver.arch import LlamaArch
from modelserver.weights import ModelWeights

UNIT_ROUNDOFF = 2.0**-24
PATHS_TIMES_SUBBLOCKS = 4

T = TypeVar("T", bound=Hashable)
Candidates = Sequence[tuple[T, float]]
"""One step's most likely tokens with their logits (or logprobs: the differences are the same),
best first."""


def float32_tolerance(*, sum_length: int, num_layers: int, scale: float) -> float:
    """The largest difference two float32 paths through `num_layers` layers whose longest sum
    has `sum_length` terms may show, on outputs of magnitude up to `scale` (see the module)."""
    relative = PATHS_TIMES_SUBBLOCKS * UNIT_ROUNDOFF * math.sqrt(sum_length) * num_layers
    return relative * max(1.0, scale)


def logit_tolerance(arch: LlamaArch, max_abs_logit: float) -> float:
    """`float32_tolerance` for the logits of a Llama-family model."""
    return float32_tolerance(
        sum_length=max(arch.hidden_size, arch.intermediate_size),
        num_layers=arch.num_layers,
        scale=max_abs_logit,
    )


def assert_logits_close(
    arch: LlamaArch, actual: torch.Tensor, expected: torch.Tensor, where: str = ""
) -> float:
    """Two paths' logits within `logit_tolerance` at the reference's scale; the max |Δ|."""
    tolerance = logit_tolerance(arch, expected.abs().max().item())
    difference = (actual - expected).abs().max().item()
    assert difference <= tolerance, f"{where}max |Δlogit| {difference:.3g} > {tolerance:.3g}"
    return difference


def max_logit_bound(weights: ModelWeights) -> float:
    """An upper bound of |logit| from the weights alone, for tests that see only logprobs.

    The final RMSNorm leaves x̂ of norm √hidden, scaled elementwise by its gain g, and a logit is
    the dot product with one head row h, so |logit| ≤ √hidden · max ‖g ∘ h‖ (Cauchy-Schwarz).
    Close for random weights (1.25 against 1.2 seen on the tiny preset), loose for trained ones
    (352 against 34 for SmolLM2), so tests that have the reference's logits use their max."""
    tensors, arch = weights.tensors, weights.arch
    head = tensors["model.embed_tokens.weight" if arch.tie_word_embeddings else "lm_head.weight"]
    gain = tensors["model.norm.weight"]
    return math.sqrt(arch.hidden_size) * float((head * gain).norm(dim=-1).max())


def top_candidates(logits: torch.Tensor, k: int = 8) -> tuple[tuple[int, float], ...]:
    """The `k` best tokens of one logits row, as `Candidates`."""
    values, ids = logits.float().topk(k)
    return tuple(zip(ids.tolist(), values.tolist(), strict=True))


def near_ties(candidates: Candidates[T], tolerance: float) -> frozenset[T]:
    """The tokens another path may choose here: those within 2·tol of the best."""
    best = candidates[0][1]
    tied = frozenset(token for token, value in candidates if value >= best - 2 * tolerance)
    assert len(tied) < len(candidates), (
        f"all {len(candidates)} candidates are within {2 * tolerance:.3g} of the best: "
        "ask for more to know them all"
    )
    return tied


@dataclass(frozen=True, slots=True)
class GreedyRun(Generic[T]):
    """One path's greedy tokens and, for each, the candidates it chose among (may be empty
    where only the other path's are needed)."""

    tokens: Sequence[T]
    candidates: Sequence[Candidates[T]] = ()


@dataclass(frozen=True, slots=True)
class Agreement:
    num_equal: int
    """How many leading tokens both runs share."""
    identical: bool
    """True when the runs are the same tokens throughout (no near-tie went the other way)."""


def assert_greedy_agrees(
    actual: GreedyRun[T],
    expected: GreedyRun[T],
    tolerance: float,
    *,
    stop_tokens: Collection[T] = (),
) -> Agreement:
    """Check one path's greedy tokens against the reference path's.

    They must be equal, except that at a near-tie of the reference another path may take any of
    the near-tied tokens; from there the two go on from different text and nothing more compares.
    `stop_tokens` end a sequence without being listed in it (as in OpenAI logprobs): a path may
    stop where the other goes on only if stopping was near-tied with going on, which is read from
    the candidates of the path that went on."""
    for step in range(max(len(actual.tokens), len(expected.tokens))):
        got = actual.tokens[step] if step < len(actual.tokens) else None
        want = expected.tokens[step] if step < len(expected.tokens) else None
        if want is not None:
            assert want in near_ties(expected.candidates[step], tolerance), (
                f"token {step}: the reference's {want!r} is not its best candidate"
            )
        if got == want:
            continue
        went_on = expected if got is None else actual if want is None else None
        if went_on is None:
            tied = near_ties(expected.candidates[step], tolerance)
            assert got in tied, (
                f"token {step}: {got!r} where the reference chose {want!r} by more than "
                f"2 × {tolerance:.3g}: {expected.candidates[step]}"
            )
        else:
            assert stop_tokens and step < len(went_on.candidates), (
                f"token {step}: one path ended and the other went on with {went_on.tokens[step]!r}"
            )
            tied = near_ties(went_on.candidates[step], tolerance)
            assert tied & set(stop_tokens), (
                f"token {step}: one path stopped and the other went on with "
                f"{went_on.tokens[step]!r} by more than 2 × {tolerance:.3g}: "
                f"{went_on.candidates[step]}"
            )
        return Agreement(step, identical=False)
    return Agreement(len(expected.tokens), identical=True)


def assert_logprobs_close(actual: Candidates[T], expected: Candidates[T], tolerance: float) -> None:
    """Two paths' top logprobs at one step: each token's within 2·tol, and a token in only one
    list within 2·tol of the other list's last value (it sat at the cut-off)."""
    assert len(actual) == len(expected), (actual, expected)
    bound = 2 * tolerance
    expected_of = dict(expected)
    actual_of = dict(actual)
    for token, value in actual:
        other = expected_of.get(token, expected[-1][1])
        assert abs(value - other) <= bound, f"{token!r}: {value} against {other} (± {bound:.3g})"
    for token, value in expected:
        if token not in actual_of:
            assert abs(value - actual[-1][1]) <= bound, f"{token!r} fell out: {value} ({bound:.3g})"
