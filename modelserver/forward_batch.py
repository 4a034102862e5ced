"""`ForwardBatch`: one step's work for the model, as tensors, built from per-sequence chunks.

Every scheduled sequence contributes a chunk: the tokens to compute this step, the position of
the first one, and its block table. The chunks' tokens are laid end to end so every linear layer
runs once over the whole step (the weights are read once for all sequences: that is the gain of
batching). Attention is the only per-sequence work, and it splits in two:

    tokens:   [ d0 d1 d2 d3 | p0 p0 p0 p0 p0 | p1 p1 p1 ]
                decodes       prefill span 0   prefill span 1

- single-token chunks (decodes) come first and are attended as one padded batch;
- longer chunks (prefills, whole or partial) are attended one span at a time, each with a causal
  mask offset by the tokens already in its cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class SequenceChunk:
    """The tokens of one sequence to compute in a step."""

    token_ids: tuple[int, ...]
    start_position: int
    block_ids: tuple[int, ...]
    wants_logits: bool
    """True when the chunk ends at the sequence's last token, so a token is sampled from it."""

    @property
    def context_len(self) -> int:
        return self.start_position + len(self.token_ids)


@dataclass(frozen=True, slots=True)
class PrefillSpan:
    token_offset: int
    num_tokens: int
    start_position: int
    block_ids: torch.Tensor


@dataclass(frozen=True, slots=True)
class ForwardBatch:
    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    num_decodes: int
    decode_block_tables: torch.Tensor
    """[num_decodes, max blocks], padded with block 0 (masked out)."""
    decode_context_lens: torch.Tensor
    prefills: tuple[PrefillSpan, ...]
    logits_indices: torch.Tensor
    """Flat index of the last token of each chunk that wants logits, in chunk order."""

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


def order_chunks(chunks: Sequence[SequenceChunk]) -> list[int]:
    """Indexes of `chunks` in batch order: single-token chunks first, then the rest."""
    decodes = [i for i, chunk in enumerate(chunks) if len(chunk.token_ids) == 1]
    prefills = [i for i, chunk in enumerate(chunks) if len(chunk.token_ids) > 1]
    return decodes + prefills


def build_forward_batch(
    chunks: Sequence[SequenceChunk], *, block_size: int, device: torch.device
) -> ForwardBatch:
    """Lay `chunks` out as a `ForwardBatch`; they must already be in `order_chunks` order, and
    the logits come back in that order."""
    assert chunks, "a forward batch needs at least one chunk"
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    logits_indices: list[int] = []
    prefills: list[PrefillSpan] = []
    decodes: list[SequenceChunk] = []
    for chunk in chunks:
        num_tokens = len(chunk.token_ids)
        assert chunk.context_len <= len(chunk.block_ids) * block_size, (
            f"a chunk reaching position {chunk.context_len} needs more than "
            f"{len(chunk.block_ids)} blocks"
        )
        offset = len(input_ids)
        if num_tokens == 1:
            assert not prefills, "single-token chunks must come before longer ones"
            decodes.append(chunk)
        else:
            prefills.append(
                PrefillSpan(
                    token_offset=offset,
                    num_tokens=num_tokens,
                    start_position=chunk.start_position,
                    block_ids=_long(
                        chunk.block_ids[: _blocks_for(chunk.context_len, block_size)], device
                    ),
                )
            )
        input_ids.extend(chunk.token_ids)
        for position in range(chunk.start_position, chunk.context_len):
            positions.append(position)
            slots.append(
                chunk.block_ids[position // block_size] * block_size + position % block_size
            )
        if chunk.wants_logits:
            logits_indices.append(offset + num_tokens - 1)

    max_blocks = max((_blocks_for(c.context_len, block_size) for c in decodes), default=0)
    tables = [
        list(c.block_ids[:max_blocks]) + [0] * (max_blocks - len(c.block_ids)) for c in decodes
    ]
    return ForwardBatch(
        input_ids=_long(input_ids, device),
        positions=_long(positions, device),
        slot_mapping=_long(slots, device),
        num_decodes=len(decodes),
        decode_block_tables=torch.tensor(tables, dtype=torch.long, device=device).reshape(
            len(decodes), max_blocks
        ),
        decode_context_lens=_long([c.context_len for c in decodes], device),
        prefills=tuple(prefills),
        logits_indices=_long(logits_indices, device),
    )


def _blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def _long(values: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long, device=device)
