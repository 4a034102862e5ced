"""Repetition, presence and frequency penalties, for a whole step's rows at once.

Two conventions, both as their sources define them:

- `repetition_penalty` (the CTRL paper's, as Hugging Face and vLLM compute it): every token
  the completion already holds has its logit divided by the penalty when positive and
  multiplied by it when negative, so a penalty above 1 always makes it less likely. 1 is off.
  Unlike Hugging Face and vLLM, tokens that are only in the prompt are not penalised. What the
  penalty is for is an answer that loops ("Boil an egg:" forty times, SmolLM2 greedy); an answer
  must be free to use the question's own words. Measured on eight everyday questions, greedy,
  SmolLM2-135M at 1.1: with the prompt penalised, "How do I boil an egg?" got "Boilin is a
  magical ingredient…" and 4 of 8 answers ran to max_tokens; with the completion only, "Boil
  an egg: 1. Boil the egg…" and 3 of 8; with no penalty, the loop and 4 of 8.
- `presence_penalty` and `frequency_penalty` (OpenAI): over the *generated* tokens only,
  `logit -= presence * [count > 0] + frequency * count`. 0 is off; both range over -2..2.

The repetition penalty is applied first, then the other two, as vLLM does. Everything runs
batched on the logits' device: each row's token ids are laid out in one padded `[rows, width]`
index tensor, counted with `scatter_add_`, and the logits of those tokens gathered, penalised
and scattered back, with no Python loop over the vocabulary or over tokens. Per step that is two
`[rows, vocab]` passes (a padded copy of the logits and the zeroed counts) and a few on
`[rows, width]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the sampler imports this module to apply the penalties it is given
    from modelserver.sampler import SamplingParams


class TokenHistory:
    """A request's prompt and generated token ids, in a tensor preallocated to its longest length,
    so appending a token costs one element write rather than a rebuild every step."""

    __slots__ = ("_ids", "length", "num_prompt_tokens")

    def __init__(self, prompt_token_ids: Sequence[int], max_tokens: int) -> None:
        assert prompt_token_ids, "a prompt needs at least one token"
        self.num_prompt_tokens = len(prompt_token_ids)
        self._ids = torch.zeros(self.num_prompt_tokens + max_tokens, dtype=torch.long)
        self._ids[: self.num_prompt_tokens] = torch.tensor(prompt_token_ids, dtype=torch.long)
        self.length = self.num_prompt_tokens

    def append(self, token_id: int) -> None:
        assert self.length < self._ids.numel(), "more tokens than max_tokens allows"
        self._ids[self.length] = token_id
        self.length += 1

    @property
    def token_ids(self) -> torch.Tensor:
        """Prompt then generated ids (a view; valid until the next append)."""
        return self._ids[: self.length]


def has_penalties(params: SamplingParams) -> bool:
    return (
        params.repetition_penalty != 1.0
        or params.presence_penalty != 0.0
        or params.frequency_penalty != 0.0
    )


def apply_penalties(
    logits: torch.Tensor, params: Sequence[SamplingParams], histories: Sequence[TokenHistory]
) -> torch.Tensor:
    """`logits` (`[rows, vocab]`, float) with each row's penalties applied, on the same device.
    Returns `logits` itself, untouched, when no row has any penalty."""
    assert logits.shape[0] == len(params) == len(histories), "one row per request"
    if not any(has_penalties(p) for p in params):
        return logits
    device = logits.device
    rows, vocab = logits.shape
    ids, generated = _layout(histories, vocab, device)
    # Only the logits of tokens a row has seen change, so the work is on `[rows, width]`
    # gathers, not on the vocabulary: one extra column absorbs the padding (its writes are
    # dropped), and every copy of a repeated token computes the same value, so scattering
    # them back is order-independent.
    padded = torch.nn.functional.pad(logits, (0, 1))
    values = padded.gather(1, ids)  # the logits of each row's tokens, position by position
    counts = torch.zeros(rows, vocab + 1, device=device).scatter_add_(1, ids, generated)
    count = counts.gather(1, ids)
    # One value per row, broadcast over its tokens: a batch mixes requests freely.
    repetition = _column([p.repetition_penalty for p in params], device)
    presence = _column([p.presence_penalty for p in params], device)
    frequency = _column([p.frequency_penalty for p in params], device)
    repeated = count > 0  # generated at least once; a prompt-only token is left alone
    penalised = torch.where(values < 0, values * repetition, values / repetition)
    penalised = torch.where(repeated, penalised, values)
    penalised = penalised - frequency * count - presence * repeated.to(logits.dtype)
    return padded.scatter_(1, ids, penalised)[:, :vocab]


def _layout(
    histories: Sequence[TokenHistory], vocab: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's token ids, padded with `vocab` (the spare column) to the longest row, and a
    float mask of the generated (not prompt) positions, both `[rows, width]` on `device`."""
    lengths = torch.tensor([h.length for h in histories])
    width = int(lengths.max())
    ids = torch.full((len(histories), width), vocab, dtype=torch.long)
    for row, history in enumerate(histories):  # rows, not tokens: at most max_num_seqs
        ids[row, : history.length] = history.token_ids
    positions = torch.arange(width)
    prompt_lengths = torch.tensor([h.num_prompt_tokens for h in histories])
    generated = (positions >= prompt_lengths[:, None]) & (positions < lengths[:, None])
    return ids.to(device), generated.to(device, torch.float32)


def _column(values: list[float], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, device=device)[:, None]
