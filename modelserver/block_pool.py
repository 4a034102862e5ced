"""Bookkeeping of the KV block pool: ref counts, the free queue in LRU order, the hash index.

The KV tensors themselves live in `kv_cache.py`; a block here is only its id, how many sequences
hold it, and (once full and committed) the hash of the tokens it holds. Pure Python, so the
policy is tested without torch.

A block is always in exactly one of three states:

    used     ref_count > 0                   held by at least one running sequence
    cached   ref_count == 0, hash set        free, but its contents can still be reused
    empty    ref_count == 0, no hash         free, holds nothing anyone can find

Cached and empty blocks both sit in the free queue. Allocation takes from the head, so the
least recently freed block is reused first; a cached block taken that way leaves the hash index
(it is evicted) before it is handed out. A hit on a cached block takes it out of the queue, and
freeing it puts it back at the tail: that is what makes the order LRU.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

BlockHash = bytes


class KVBlock:
    """One block of the pool. Mutable, and owned by the pool: callers only read it."""

    __slots__ = ("block_hash", "block_id", "next_free", "prev_free", "ref_count")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: BlockHash | None = None
        # Links of the free queue; both None while the block is not in it.
        self.prev_free: KVBlock | None = None
        self.next_free: KVBlock | None = None

    def __repr__(self) -> str:
        cached = " cached" if self.block_hash is not None else ""
        return f"KVBlock({self.block_id}, ref={self.ref_count}{cached})"


class FreeBlockQueue:
    """Free blocks in eviction order, head first.

    A doubly-linked list threaded through the blocks themselves rather than a deque, because a
    prefix hit must take a block out of the middle in O(1).
    """

    def __init__(self, blocks: Sequence[KVBlock]) -> None:
        self._head: KVBlock | None = None
        self._tail: KVBlock | None = None
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def popleft(self) -> KVBlock:
        block = self._head
        assert block is not None, "popleft from an empty free queue"
        self.remove(block)
        return block

    def append(self, block: KVBlock) -> None:
        assert block.prev_free is None and block.next_free is None and block is not self._head, (
            f"{block} is already in the free queue"
        )
        block.prev_free = self._tail
        if self._tail is None:
            self._head = block
        else:
            self._tail.next_free = block
        self._tail = block
        self.num_free_blocks += 1

    def remove(self, block: KVBlock) -> None:
        if block.prev_free is None:
            assert self._head is block, f"{block} is not in the free queue"
            self._head = block.next_free
        else:
            block.prev_free.next_free = block.next_free
        if block.next_free is None:
            self._tail = block.prev_free
        else:
            block.next_free.prev_free = block.prev_free
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def __iter__(self) -> Iterator[KVBlock]:
        block = self._head
        while block is not None:
            yield block
            block = block.next_free


class BlockPool:
    """`num_blocks` blocks, their ref counts, the free queue and the hash → block index."""

    def __init__(self, num_blocks: int) -> None:
        assert num_blocks > 0, f"a pool needs at least one block, got {num_blocks}"
        self.blocks = [KVBlock(block_id) for block_id in range(num_blocks)]
        self._free = FreeBlockQueue(self.blocks)
        self._cached: dict[BlockHash, KVBlock] = {}
        self.num_evictions = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence holds (empty or cached): what allocation can take."""
        return self._free.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self._free.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks in the hash index, used or free."""
        return len(self._cached)

    def free_order(self) -> list[int]:
        """Ids of the free blocks, next to be evicted first."""
        return [block.block_id for block in self._free]

    def lookup(self, block_hash: BlockHash) -> KVBlock | None:
        return self._cached.get(block_hash)

    def allocate(self, num_blocks: int) -> list[KVBlock]:
        """Take `num_blocks` blocks from the head of the free queue, each with ref count 1.

        Cached blocks taken this way are evicted: their hash leaves the index first.
        """
        assert num_blocks <= self.num_free_blocks, (
            f"asked for {num_blocks} blocks with {self.num_free_blocks} free"
        )
        taken = []
        for _ in range(num_blocks):
            block = self._free.popleft()
            if block.block_hash is not None:
                del self._cached[block.block_hash]
                block.block_hash = None
                self.num_evictions += 1
            block.ref_count = 1
            taken.append(block)
        return taken

    def touch(self, blocks: Sequence[KVBlock]) -> None:
        """One more holder for each block (a prefix hit); free ones leave the free queue."""
        for block in blocks:
            if block.ref_count == 0:
                self._free.remove(block)
            block.ref_count += 1

    def free(self, blocks: Sequence[KVBlock]) -> None:
        """One holder fewer for each block; those nobody holds join the free queue's tail, in
        the order given (so pass the ones to evict first, first)."""
        for block in blocks:
            assert block.ref_count > 0, f"{block} freed more often than it was taken"
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free.append(block)

    def cache(self, block: KVBlock, block_hash: BlockHash) -> bool:
        """Index a full, computed block under `block_hash`. False (and nothing changes) when the
        hash is already indexed: another sequence computed the same tokens at the same time, and
        its copy stays the one found."""
        assert block.ref_count > 0, f"only a held block can be cached, not {block}"
        assert block.block_hash is None, f"{block} is already cached"
        if block_hash in self._cached:
            return False
        block.block_hash = block_hash
        self._cached[block_hash] = block
        return True
