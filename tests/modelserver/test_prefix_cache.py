"""Prefix matching and eviction on an 8-block pool of 4-token blocks, with exact expectations."""

from __future__ import annotations

import pytest

from modelserver.block_pool import BlockPool
from modelserver.prefix_cache import PrefixCache, hash_block

A = list(range(100, 110))  # 10 tokens: 2 full blocks and a partial one
B = list(range(200, 206))  # 6 tokens: 1 full block and a partial one


@pytest.fixture
def cache() -> PrefixCache:
    return PrefixCache(BlockPool(8), block_size=4)


def run(cache: PrefixCache, request_id: str, tokens: list[int], salt: str | None = None) -> int:
    """Admit `tokens` with whatever prefix is cached, compute all of them; cached token count."""
    match = cache.find_prefix(tokens, salt)
    assert cache.start(request_id, match, len(tokens))
    cache.commit(request_id, tokens, len(tokens))
    return match.num_cached_tokens


def test_hash_chain_covers_the_parent_and_the_salt_only_at_the_root() -> None:
    root = hash_block(None, [1, 2], None)
    assert hash_block(None, [1, 2], None) == root
    assert hash_block(None, [1, 2], "tenant-a") != root
    assert hash_block(None, [1, 2], "") == root  # no salt and an empty salt are the same tenant
    child = hash_block(root, [3, 4], None)
    assert child != hash_block(hash_block(None, [9, 9], None), [3, 4], None)
    # Below the root the salt is carried by the parent hash alone.
    assert hash_block(root, [3, 4], "ignored") == child


def test_eviction_order_follows_lru_and_frees_sequence_tails_first(cache: PrefixCache) -> None:
    pool = cache.pool
    assert run(cache, "a", A) == 0
    assert cache.block_ids("a") == [0, 1, 2]
    assert run(cache, "b", B) == 0
    assert cache.block_ids("b") == [3, 4]
    assert pool.num_cached_blocks == 3  # a's two full blocks, b's one

    cache.free("a")
    cache.free("b")
    # Tails first, and a before b (it was freed first).
    assert pool.free_order() == [5, 6, 7, 2, 1, 0, 4, 3]

    # c shares a's first 8 tokens: blocks 0 and 1 are reused, one new block comes from the head.
    c_tokens = [*A[:8], 1, 2]
    assert run(cache, "c", c_tokens) == 8
    assert cache.block_ids("c") == [0, 1, 5]
    assert pool.free_order() == [6, 7, 2, 4, 3]

    # d needs five blocks: all the free ones, in order, and b's cached block 3 is evicted.
    assert run(cache, "d", list(range(300, 320))) == 0
    assert cache.block_ids("d") == [6, 7, 2, 4, 3]
    assert pool.num_evictions == 1
    assert pool.lookup(hash_block(None, B[:4], None)) is None
    assert cache.find_prefix([*B, 7], None).num_cached_tokens == 0
    # a's prefix survived: c still holds it.
    assert cache.find_prefix(A, None).num_cached_tokens == 8


def test_a_request_that_does_not_fit_changes_nothing(cache: PrefixCache) -> None:
    run(cache, "a", list(range(24)))  # 6 blocks
    before = (cache.pool.free_order(), cache.pool.num_cached_blocks)

    match = cache.find_prefix(list(range(50, 62)), None)
    assert not cache.start("big", match, 12)  # needs 3 blocks, 2 free

    assert (cache.pool.free_order(), cache.pool.num_cached_blocks) == before
    assert not cache.holds("big")


def test_free_cached_hits_count_against_free_blocks(cache: PrefixCache) -> None:
    run(cache, "a", A)
    cache.free("a")
    match = cache.find_prefix([*A[:8], 1, 2, 3, 4, 5], None)

    assert len(match.blocks) == 2
    # 13 tokens need 4 blocks: 2 reused (both sitting in the free queue) and 2 new.
    assert cache.num_blocks_needed(match, 13) == 4


def test_the_last_prompt_token_is_always_computed(cache: PrefixCache) -> None:
    run(cache, "a", list(range(8)))  # exactly two full blocks
    cache.free("a")

    assert cache.find_prefix(list(range(8)), None).num_cached_tokens == 4
    assert cache.find_prefix(list(range(9)), None).num_cached_tokens == 8


def test_salts_keep_tenants_apart(cache: PrefixCache) -> None:
    run(cache, "a", A, salt="tenant-a")
    cache.free("a")

    assert cache.find_prefix(A, "tenant-b").num_cached_tokens == 0
    assert cache.find_prefix(A, None).num_cached_tokens == 0
    assert cache.find_prefix(A, "tenant-a").num_cached_tokens == 8


def test_generated_tokens_become_findable_when_their_block_fills(cache: PrefixCache) -> None:
    prompt = [1, 2, 3, 4, 5, 6]
    match = cache.find_prefix(prompt, None)
    cache.start("a", match, 6)
    cache.commit("a", prompt, 6)
    assert cache.pool.num_cached_blocks == 1
    tokens = [*prompt, 7, 8, 9]  # two generated tokens complete the second block
    assert cache.grow("a", 9)
    cache.commit("a", tokens, 8)

    assert cache.pool.num_cached_blocks == 2
    cache.free("a")
    assert cache.find_prefix([*tokens, 10], None).num_cached_tokens == 8


def test_the_same_prefix_computed_twice_at_once_is_indexed_once(cache: PrefixCache) -> None:
    for request_id in ("a", "b"):  # both admitted before either committed
        cache.start(request_id, cache.find_prefix(A, None), len(A))
    cache.commit("a", A, len(A))
    cache.commit("b", A, len(A))

    assert cache.pool.num_cached_blocks == 2
    assert cache.find_prefix(A, None).blocks == tuple(cache.pool.blocks[i] for i in (0, 1))
    cache.free("a")
    cache.free("b")
    assert cache.pool.num_free_blocks == 8
    assert all(block.ref_count == 0 for block in cache.pool.blocks)


def test_hit_statistics_count_tokens_at_admission(cache: PrefixCache) -> None:
    run(cache, "a", A)
    run(cache, "b", [*A[:8], 0, 0, 0])

    assert (cache.num_queried_tokens, cache.num_hit_tokens) == (21, 8)
