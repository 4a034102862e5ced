"""Prefix caching over the block pool: which blocks a sequence holds, and which it can reuse.

A full block is named by a hash chain:

    h0 = H(salt, tokens[0:B])          h1 = H(h0, tokens[B:2B])          h2 = H(h1, tokens[2B:3B])

so a block's hash stands for every token before it, and equal hashes mean equal prefixes (SHA-256,
so tenants cannot forge a collision). The salt (the request's `cache_salt`) enters only the first
block, and through the chain every later one: requests with different salts never share a block.

A new request looks its prompt's hashes up in order and reuses every block up to the first miss;
only the rest is prefilled. Blocks become findable when they are full and computed (`commit`),
generated tokens included, so a follow-up turn reuses the answer's blocks too. A finished
sequence's blocks go back to the pool's free queue tail-first: under pressure the end of a
sequence, the part least likely shared, is evicted before its beginning.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from modelserver.block_pool import BlockHash, BlockPool, KVBlock


def hash_block(parent: BlockHash | None, token_ids: Sequence[int], salt: str | None) -> BlockHash:
    """The chained hash of one full block."""
    digest = hashlib.sha256()
    if parent is None:
        # Length-prefixed so a salt can never run into the token bytes.
        salt_bytes = (salt or "").encode("utf-8")
        digest.update(b"root" + struct.pack("<I", len(salt_bytes)) + salt_bytes)
    else:
        digest.update(b"next" + parent)
    digest.update(struct.pack(f"<{len(token_ids)}I", *token_ids))
    return digest.digest()


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """The cached blocks a prompt can start from."""

    blocks: tuple[KVBlock, ...]
    num_cached_tokens: int
    salt: str | None


@dataclass(slots=True)
class _SequenceBlocks:
    salt: str | None
    blocks: list[KVBlock] = field(default_factory=list)
    hashes: list[BlockHash] = field(default_factory=list)  # of the first len(hashes) blocks


class PrefixCache:
    """The blocks of every live sequence, allocated from one `BlockPool`."""

    def __init__(self, pool: BlockPool, block_size: int) -> None:
        assert block_size > 0, f"block_size must be positive, got {block_size}"
        self.pool = pool
        self.block_size = block_size
        self._sequences: dict[str, _SequenceBlocks] = {}
        self.num_queried_tokens = 0
        self.num_hit_tokens = 0

    def find_prefix(self, token_ids: Sequence[int], salt: str | None) -> PrefixMatch:
        """The longest run of cached full blocks `token_ids` starts with. Changes nothing.

        The last prompt token is never served from cache: its forward pass yields the logits the
        first output token is sampled from. So a prompt of exactly k full blocks matches at most
        k - 1 of them.
        """
        max_blocks = (len(token_ids) - 1) // self.block_size
        blocks: list[KVBlock] = []
        parent: BlockHash | None = None
        for index in range(max_blocks):
            start = index * self.block_size
            parent = hash_block(parent, token_ids[start : start + self.block_size], salt)
            block = self.pool.lookup(parent)
            if block is None:
                break
            blocks.append(block)
        return PrefixMatch(tuple(blocks), len(blocks) * self.block_size, salt)

    def num_blocks_needed(self, match: PrefixMatch, num_tokens: int) -> int:
        """Free blocks admitting a new sequence of `num_tokens` with `match` would consume:
        the new blocks, plus the matched ones that sit in the free queue now."""
        new_blocks = -(-num_tokens // self.block_size) - len(match.blocks)
        return max(new_blocks, 0) + sum(1 for block in match.blocks if block.ref_count == 0)

    def start(self, request_id: str, match: PrefixMatch, num_tokens: int) -> bool:
        """Admit a sequence: hold `match`'s blocks and enough new ones for `num_tokens` tokens.
        False, and nothing changes, when the pool has too few free blocks."""
        assert request_id not in self._sequences, f"{request_id} already holds blocks"
        if self.num_blocks_needed(match, num_tokens) > self.pool.num_free_blocks:
            return False
        self.pool.touch(match.blocks)
        sequence = _SequenceBlocks(match.salt, list(match.blocks))
        sequence.hashes = [block.block_hash for block in match.blocks if block.block_hash]
        assert len(sequence.hashes) == len(match.blocks), "matched blocks must all be cached"
        self._sequences[request_id] = sequence
        self.num_queried_tokens += num_tokens
        self.num_hit_tokens += match.num_cached_tokens
        grown = self.grow(request_id, num_tokens)
        assert grown, "the free-block count was checked above"
        return True

    def grow(self, request_id: str, num_tokens: int) -> bool:
        """Make the sequence hold blocks for `num_tokens` tokens in all. False, and nothing
        changes, when the pool has too few free blocks."""
        sequence = self._sequences[request_id]
        missing = -(-num_tokens // self.block_size) - len(sequence.blocks)
        if missing <= 0:
            return True
        if missing > self.pool.num_free_blocks:
            return False
        sequence.blocks.extend(self.pool.allocate(missing))
        return True

    def commit(self, request_id: str, token_ids: Sequence[int], num_computed_tokens: int) -> None:
        """Make the sequence's blocks that are now full and computed findable by later requests.

        `token_ids` is the whole sequence so far (prompt and generated tokens).
        """
        sequence = self._sequences[request_id]
        num_full = num_computed_tokens // self.block_size
        parent = sequence.hashes[-1] if sequence.hashes else None
        for index in range(len(sequence.hashes), num_full):
            start = index * self.block_size
            parent = hash_block(parent, token_ids[start : start + self.block_size], sequence.salt)
            sequence.hashes.append(parent)
            self.pool.cache(sequence.blocks[index], parent)

    def free(self, request_id: str) -> None:
        """Release the sequence's blocks, last block first (see the module docstring)."""
        sequence = self._sequences.pop(request_id)
        self.pool.free(sequence.blocks[::-1])

    def block_ids(self, request_id: str) -> list[int]:
        return [block.block_id for block in self._sequences[request_id].blocks]

    def holds(self, request_id: str) -> bool:
        return request_id in self._sequences

    @property
    def num_sequences(self) -> int:
        return len(self._sequences)
