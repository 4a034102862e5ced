"""Choosing the next token from logits: penalties, greedy, temperature, top-p, seeds, logprobs.

Penalties (penalties.py) are applied on the logits' device, for all rows at once; the draw then
runs on the CPU in float32 whatever the model's device: it is a few rows of one vocabulary each,
and a CPU `torch.Generator` per request makes a seeded request draw the same tokens however it
is batched, preempted or placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from modelserver.penalties import TokenHistory, apply_penalties

MAX_TOP_LOGPROBS = 20
MAX_ABS_OPENAI_PENALTY = 2.0
MAX_REPETITION_PENALTY = 2.0


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy: the most likely token, deterministic."""
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    """Divides positive and multiplies negative logits of tokens already in prompt or completion
    (Hugging Face's convention); 1 is off."""
    presence_penalty: float = 0.0
    """Subtracted from the logit of every token the completion already has (OpenAI's); 0 is off."""
    frequency_penalty: float = 0.0
    """Subtracted once per occurrence in the completion (OpenAI's); 0 is off."""
    seed: int | None = None
    """Fixes the random draws of a request with temperature > 0."""
    max_tokens: int = 16
    logprobs: bool = False
    """Return the chosen token's logprob."""
    top_logprobs: int = 0
    """Also return this many most likely alternatives (0..20)."""
    stop_token_ids: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        assert self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}"
        assert 0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}"
        assert 0 < self.repetition_penalty <= MAX_REPETITION_PENALTY, (
            f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}"
        )
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            assert abs(value) <= MAX_ABS_OPENAI_PENALTY, f"{name} must be in -2..2, got {value}"
        assert self.max_tokens > 0, f"max_tokens must be positive, got {self.max_tokens}"
        assert 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS, "top_logprobs must be in 0..20"


@dataclass(frozen=True, slots=True)
class SampledToken:
    token_id: int
    logprob: float | None
    """log P(token) under the model's raw distribution (before temperature and top-p), as OpenAI
    and vLLM report it; None unless the request asked for logprobs."""
    top_logprobs: tuple[tuple[int, float], ...] = ()


def make_generator(params: SamplingParams, fallback_seed: int) -> torch.Generator:
    """The request's own random stream: its seed, else `fallback_seed` (chosen by the caller)."""
    seed = params.seed if params.seed is not None else fallback_seed
    return torch.Generator().manual_seed(seed)


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator],
    histories: Sequence[TokenHistory],
) -> list[SampledToken]:
    """One token for each row of `logits` (`[rows, vocab]`), under that row's parameters;
    `histories` hold each row's tokens so far, for its penalties."""
    assert logits.shape[0] == len(params) == len(generators), "one row per request"
    raw = logits.detach().float()
    penalised = apply_penalties(raw, params, histories)
    rows = penalised.cpu()
    # Logprobs are of the raw distribution, as OpenAI and vLLM report them: a second copy only
    # when the penalties changed the rows and someone asked for logprobs.
    needs_raw = penalised is not raw and any(p.logprobs for p in params)
    raw_rows = raw.cpu() if needs_raw else rows
    greedy = rows.argmax(dim=-1).tolist()
    sampled = []
    for row, raw_row, row_params, generator, greedy_id in zip(
        rows, raw_rows, params, generators, greedy, strict=True
    ):
        token_id = (
            int(greedy_id) if row_params.temperature == 0 else _draw(row, row_params, generator)
        )
        sampled.append(_with_logprobs(raw_row, token_id, row_params))
    return sampled


def _draw(row: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    probs = torch.softmax(row / params.temperature, dim=-1)
    if params.top_p < 1.0:
        # Keep the smallest set of most likely tokens whose mass reaches top_p (always at least
        # the first), renormalised by multinomial.
        sorted_probs, order = probs.sort(descending=True)
        mass_before = sorted_probs.cumsum(0) - sorted_probs
        sorted_probs[mass_before >= params.top_p] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _with_logprobs(row: torch.Tensor, token_id: int, params: SamplingParams) -> SampledToken:
    if not params.logprobs:
        return SampledToken(token_id, None)
    logprobs = torch.log_softmax(row, dim=-1)
    top: tuple[tuple[int, float], ...] = ()
    if params.top_logprobs:
        values, ids = logprobs.topk(params.top_logprobs)
        top = tuple(zip(ids.tolist(), values.tolist(), strict=True))
    return SampledToken(token_id, float(logprobs[token_id]), top)
