"""The block pool's bookkeeping on an 8-block pool: ref counts, LRU free order, the hash index."""

from __future__ import annotations

import pytest

from modelserver.block_pool import BlockPool, FreeBlockQueue, KVBlock


def test_free_queue_keeps_order_and_removes_from_the_middle() -> None:
    blocks = [KVBlock(i) for i in range(5)]
    queue = FreeBlockQueue(blocks)

    assert queue.popleft() is blocks[0]
    queue.remove(blocks[2])
    queue.append(blocks[0])

    assert [b.block_id for b in queue] == [1, 3, 4, 0]
    assert queue.num_free_blocks == 4
    queue.remove(blocks[0])  # the tail
    queue.remove(blocks[1])  # the head
    assert [b.block_id for b in queue] == [3, 4]


def test_free_queue_rejects_a_block_twice() -> None:
    blocks = [KVBlock(0)]
    queue = FreeBlockQueue(blocks)
    with pytest.raises(AssertionError, match="already in the free queue"):
        queue.append(blocks[0])


def test_allocation_takes_the_head_and_free_appends_in_the_given_order() -> None:
    pool = BlockPool(8)

    taken = pool.allocate(3)

    assert [b.block_id for b in taken] == [0, 1, 2]
    assert [b.ref_count for b in taken] == [1, 1, 1]
    assert (pool.num_used_blocks, pool.num_free_blocks) == (3, 5)
    pool.free(taken[::-1])
    assert pool.free_order() == [3, 4, 5, 6, 7, 2, 1, 0]
    assert pool.num_used_blocks == 0


def test_a_shared_block_is_free_only_when_its_last_holder_lets_go() -> None:
    pool = BlockPool(8)
    block = pool.allocate(1)[0]
    pool.touch([block])
    assert block.ref_count == 2

    pool.free([block])
    assert block.ref_count == 1
    assert 0 not in pool.free_order()
    pool.free([block])
    assert pool.free_order()[-1] == 0


def test_touching_a_free_block_takes_it_out_of_the_queue() -> None:
    pool = BlockPool(8)
    pool.free(pool.allocate(2))  # free order: 2..7, 0, 1

    pool.touch([pool.blocks[0]])

    assert pool.blocks[0].ref_count == 1
    assert pool.free_order() == [2, 3, 4, 5, 6, 7, 1]


def test_allocating_a_cached_free_block_evicts_it_from_the_index() -> None:
    pool = BlockPool(8)
    first = pool.allocate(8)
    assert pool.cache(first[0], b"h0")
    assert pool.cache(first[1], b"h1")
    pool.free(first)  # free order 0..7, 0 and 1 still findable
    assert pool.lookup(b"h0") is first[0]
    assert pool.num_cached_blocks == 2

    pool.allocate(1)

    assert pool.lookup(b"h0") is None
    assert pool.lookup(b"h1") is first[1]
    assert first[0].block_hash is None
    assert (pool.num_evictions, pool.num_cached_blocks) == (1, 1)


def test_a_hash_already_indexed_is_not_taken_by_a_second_block() -> None:
    pool = BlockPool(8)
    a, b = pool.allocate(2)
    assert pool.cache(a, b"same")

    assert not pool.cache(b, b"same")

    assert pool.lookup(b"same") is a
    assert b.block_hash is None


def test_freeing_more_often_than_taken_is_a_broken_invariant() -> None:
    pool = BlockPool(8)
    block = pool.allocate(1)[0]
    pool.free([block])
    with pytest.raises(AssertionError, match="freed more often"):
        pool.free([block])


def test_allocating_more_than_is_free_is_a_broken_invariant() -> None:
    pool = BlockPool(8)
    pool.allocate(6)
    with pytest.raises(AssertionError, match="asked for 3 blocks with 2 free"):
        pool.allocate(3)
