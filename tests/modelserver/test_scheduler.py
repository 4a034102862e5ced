"""Continuous batching without a model: the test plays the sampler and checks each step's plan."""

from __future__ import annotations

from modelserver.block_pool import BlockPool
from modelserver.prefix_cache import PrefixCache
from modelserver.scheduler import FinishReason, Scheduler, SequenceState, StepPlan

EOS = 0


def make_scheduler(
    num_blocks: int,
    *,
    max_batch_tokens: int = 64,
    max_num_seqs: int = 8,
    pool: BlockPool | None = None,
) -> Scheduler:
    return Scheduler(
        PrefixCache(pool or BlockPool(num_blocks), block_size=4),
        max_num_seqs=max_num_seqs,
        max_batch_tokens=max_batch_tokens,
        max_model_len=num_blocks * 4,
    )


def seq(request_id: str, prompt: list[int], max_tokens: int = 4) -> SequenceState:
    return SequenceState(request_id, list(prompt), len(prompt), max_tokens, frozenset({EOS}))


def step(scheduler: Scheduler, token: int = 7) -> tuple[StepPlan, dict[str, FinishReason | None]]:
    """Schedule, "sample" `token` for every sequence that wants logits, update."""
    plan = scheduler.schedule()
    sampled = {c.request_id: token for c in plan.chunks if c.chunk.wants_logits}
    updates = scheduler.update(plan, sampled)
    return plan, {u.request_id: u.finish_reason for u in updates}


def shape(plan: StepPlan) -> list[tuple[str, int, int, bool]]:
    return [
        (c.request_id, c.chunk.start_position, len(c.chunk.token_ids), c.chunk.wants_logits)
        for c in plan.chunks
    ]


def test_a_long_prompt_is_prefilled_in_chunks_of_the_token_budget() -> None:
    scheduler = make_scheduler(16, max_batch_tokens=8)
    scheduler.add(seq("a", list(range(1, 21))))

    assert shape(step(scheduler)[0]) == [("a", 0, 8, False)]
    assert shape(step(scheduler)[0]) == [("a", 8, 8, False)]
    plan, updates = step(scheduler)
    assert shape(plan) == [("a", 16, 4, True)]
    assert updates == {"a": None}
    assert shape(step(scheduler)[0]) == [("a", 20, 1, True)]


def test_decodes_go_first_and_prefills_share_the_rest_of_the_budget() -> None:
    scheduler = make_scheduler(16, max_batch_tokens=6)
    scheduler.add(seq("a", [1, 2, 3]))
    step(scheduler)  # a: prompt computed, one token sampled
    scheduler.add(seq("b", list(range(1, 12))))

    assert shape(step(scheduler)[0]) == [("a", 3, 1, True), ("b", 0, 5, False)]
    assert shape(step(scheduler)[0]) == [("a", 4, 1, True), ("b", 5, 5, False)]
    assert shape(step(scheduler)[0]) == [("a", 5, 1, True), ("b", 10, 1, True)]


def test_requests_beyond_the_pool_wait_and_start_when_blocks_free() -> None:
    scheduler = make_scheduler(4)  # 16 token slots
    scheduler.add(seq("a", list(range(1, 11)), max_tokens=2))  # 3 blocks
    scheduler.add(seq("b", list(range(11, 21)), max_tokens=2))  # 3 more: does not fit

    assert shape(step(scheduler)[0]) == [("a", 0, 10, True)]
    assert (scheduler.num_running, scheduler.num_waiting) == (1, 1)
    _plan, updates = step(scheduler)
    assert updates == {"a": FinishReason.LENGTH}
    assert shape(step(scheduler)[0]) == [("b", 0, 10, True)]


def test_the_newest_sequence_is_preempted_and_resumes_from_its_cached_blocks() -> None:
    scheduler = make_scheduler(5)
    scheduler.add(seq("a", list(range(1, 9)), max_tokens=3))  # 2 blocks
    scheduler.add(seq("b", list(range(11, 19)), max_tokens=3))  # 2 blocks, 1 left free
    step(scheduler)  # both prefilled, one token each: 9 tokens, 8 computed

    # Both now need a third block; a (older) takes the last one, b is preempted.
    plan = scheduler.schedule()
    assert shape(plan) == [("a", 8, 1, True)]
    assert plan.preempted == ("b",)
    scheduler.update(plan, {"a": 7})
    assert (scheduler.num_running, scheduler.num_waiting) == (1, 1)

    step(scheduler)  # a reaches max_tokens and frees its blocks
    plan, _ = step(scheduler)
    # b comes back: its two full blocks are still cached, only its generated token is recomputed.
    assert shape(plan) == [("b", 8, 1, True)]


def test_admission_is_first_come_first_served() -> None:
    scheduler = make_scheduler(4)
    scheduler.add(seq("a", list(range(1, 9)), max_tokens=4))  # 2 blocks
    scheduler.add(seq("big", list(range(1, 11)), max_tokens=2))  # 3 blocks: does not fit yet
    scheduler.add(seq("small", [1, 2], max_tokens=2))  # would fit, but must not overtake

    plan, _ = step(scheduler)
    assert [c.request_id for c in plan.chunks] == ["a"]
    assert scheduler.num_waiting == 2


def test_stop_tokens_and_max_tokens_end_sequences_and_free_their_blocks() -> None:
    cache_pool = BlockPool(8)
    scheduler = make_scheduler(8, pool=cache_pool)
    scheduler.add(seq("stops", [1, 2, 3], max_tokens=10))
    scheduler.add(seq("runs", [4, 5, 6], max_tokens=2))

    plan = scheduler.schedule()
    updates = scheduler.update(plan, {"stops": EOS, "runs": 9})
    assert [(u.request_id, u.token_id, u.finish_reason) for u in updates] == [
        ("stops", EOS, FinishReason.STOP),
        ("runs", 9, None),
    ]
    _, finished = step(scheduler)
    assert finished == {"runs": FinishReason.LENGTH}
    assert not scheduler.has_work()
    assert cache_pool.num_free_blocks == 8


def test_abort_frees_a_running_sequence_and_drops_a_waiting_one() -> None:
    pool = BlockPool(3)
    scheduler = make_scheduler(3, max_num_seqs=1, pool=pool)
    scheduler.add(seq("running", [1, 2, 3, 4, 5]))
    scheduler.add(seq("waiting", [1, 2]))
    step(scheduler)

    assert scheduler.abort("running")
    assert scheduler.abort("waiting")
    assert not scheduler.abort("unknown")
    assert not scheduler.has_work()
    assert pool.num_free_blocks == 3


def test_max_num_seqs_caps_the_running_set() -> None:
    scheduler = make_scheduler(16, max_num_seqs=2)
    for name in "abc":
        scheduler.add(seq(name, [1, 2, 3]))

    plan, _ = step(scheduler)
    assert [c.request_id for c in plan.chunks] == ["a", "b"]
    assert scheduler.num_waiting == 1


def test_a_sequence_aborted_while_its_step_ran_is_skipped() -> None:
    scheduler = make_scheduler(8)
    scheduler.add(seq("a", [1, 2, 3]))
    plan = scheduler.schedule()
    scheduler.abort("a")

    assert scheduler.update(plan, {"a": 5}) == []
