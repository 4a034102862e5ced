"""Which partitions are held, and which go past the memory budget (`PartitionResidency`): a
policy over tags, sizes and the order of use, with exact expectations."""

from __future__ import annotations

from tiers.semantic.residency import PartitionResidency, PartitionState


def held(policy: PartitionResidency, *tags: str) -> None:
    for tag in tags:
        assert policy.touch(tag)
        policy.loaded(tag)


def test_the_first_ask_starts_a_load_and_later_asks_do_not() -> None:
    policy = PartitionResidency(max_bytes=100)
    assert policy.touch("a") and policy.state("a") is PartitionState.LOADING
    assert not policy.touch("a") and policy.loading() == ["a"] and policy.held() == []
    policy.loaded("a")
    assert policy.state("a") is PartitionState.HELD and policy.holds("a")
    assert not policy.holds("b") and policy.state("b") is None


def test_past_the_budget_the_least_recently_asked_about_go_first() -> None:
    policy = PartitionResidency(max_bytes=100)
    held(policy, "a", "b", "c")
    policy.touch("a")  # a is now the most recent: b, then c, are the coldest
    sizes = {"a": 50, "b": 40, "c": 30}
    assert policy.victims(sizes) == ["b"]  # 120 → 80
    assert policy.victims({**sizes, "a": 90}) == ["b", "c"]  # 160 → 120 → 90
    assert policy.victims({"a": 10, "b": 10, "c": 10}) == []


def test_neither_a_loading_partition_nor_the_one_kept_is_chosen() -> None:
    policy = PartitionResidency(max_bytes=10)
    held(policy, "old", "kept")
    policy.touch("loading")
    sizes = {"old": 50, "kept": 50, "loading": 50}
    assert policy.victims(sizes, keep="kept") == ["old"]  # still over: nothing else may go


def test_a_forgotten_partition_loads_again_when_asked() -> None:
    policy = PartitionResidency(max_bytes=10)
    held(policy, "a")
    policy.forget("a")
    assert not policy.holds("a") and policy.touch("a")
