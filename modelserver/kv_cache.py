"""The KV cache tensors: one preallocated pool of blocks on the model's device.

Layout per layer: `[num_blocks, block_size, num_kv_heads, head_dim]`, keys and values apart. A
token's slot is `block_id * block_size + offset`, so writing a step's keys is one `index_copy_`
into the flattened view, and a sequence's keys are the blocks its block table lists, in order.
The pool is sized once from a memory budget and never grows: on a GPU this is the memory the KV
cache lives in, and on any device allocation never happens while serving.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from modelserver.arch import LlamaArch
from modelserver.errors import ConfigError


def num_blocks_for_budget(
    arch: LlamaArch, *, block_size: int, dtype: torch.dtype, budget_bytes: int
) -> int:
    """How many blocks of `block_size` tokens fit in `budget_bytes`."""
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    block_bytes = arch.kv_bytes_per_token(dtype_bytes) * block_size
    num_blocks = budget_bytes // block_bytes
    if num_blocks < 1:
        raise ConfigError(
            f"the KV budget of {budget_bytes} bytes holds no block of {block_size} tokens "
            f"({block_bytes} bytes each); raise kv_cache_mib"
        )
    return int(num_blocks)


@dataclass(frozen=True, slots=True)
class KVCache:
    """Per-layer key and value block tensors."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    block_size: int

    @classmethod
    def allocate(
        cls,
        arch: LlamaArch,
        *,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> KVCache:
        shape = (num_blocks, block_size, arch.num_kv_heads, arch.head_dim)
        # Zeros, not empty: padded block-table entries read unused slots, and a NaN there would
        # survive the attention mask (0 × NaN is NaN).
        return cls(
            keys=tuple(
                torch.zeros(shape, dtype=dtype, device=device) for _ in range(arch.num_layers)
            ),
            values=tuple(
                torch.zeros(shape, dtype=dtype, device=device) for _ in range(arch.num_layers)
            ),
            block_size=block_size,
        )

    @property
    def num_blocks(self) -> int:
        return int(self.keys[0].shape[0])

    @property
    def device(self) -> torch.device:
        return self.keys[0].device

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))
