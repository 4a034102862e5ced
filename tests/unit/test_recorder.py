"""The cache recorder: each event counted under the label the stats JSON and /metrics show, a
snapshot that later events do not change, and edge mode's hand-over of served counts."""

from __future__ import annotations

from typing import Any

import pytest

from core.recorder import (
    CacheRecorder,
    GuardName,
    NotStoredReason,
    OtherFinishReason,
    ServedCounts,
)
from fallback.degrade import DegradeKind
from proxy.answering.feedback import ServedRequests
from proxy.edge.report import EdgeReportReceiver
from tiers.base import MatchKind, TierName


def test_each_event_counts_under_its_label() -> None:
    recorder = CacheRecorder()
    recorder.hit(TierName.LRU_K, MatchKind.EXACT, 10, 20, 0.5)
    recorder.hit("semantic", "lemma", 1, 2, 0.25)
    recorder.miss("p1")
    recorder.miss("p1")
    recorder.bypass()
    recorder.coalesced()
    recorder.degraded(DegradeKind.STALE)
    recorder.tier_error(TierName.REDIS)
    recorder.tier_error("replication")
    recorder.stored()
    recorder.not_stored(NotStoredReason.TOO_LARGE)
    recorder.not_stored(OtherFinishReason("function_call_soon"))
    recorder.guard_rejected(GuardName.ANSWERS)
    recorder.evicted_by_feedback()

    counts = recorder.snapshot()
    assert counts.hits == {("lru_k", "exact"): 1, ("semantic", "lemma"): 1}
    assert all(type(label) is str for key in counts.hits for label in key)
    assert (counts.misses, counts.bypasses, counts.coalesced, counts.stores) == (2, 1, 1, 1)
    assert counts.degraded == {"stale": 1}
    assert counts.tier_errors == {"redis": 1, "replication": 1}
    assert counts.not_stored == {"too_large": 1, "function_call_soon": 1}
    assert counts.guard_rejections == {"answers": 1}
    assert counts.evictions_by_feedback == 1
    assert (counts.prompt_tokens_saved, counts.completion_tokens_saved) == (11, 22)
    assert counts.usd_saved == 0.75
    assert counts.total_hits == 2
    assert counts.hit_rate == 0.5


def test_a_snapshot_is_read_only_and_stays_as_taken() -> None:
    recorder = CacheRecorder()
    recorder.degraded(DegradeKind.FALLBACK)
    counts = recorder.snapshot()
    recorder.degraded(DegradeKind.FALLBACK)
    recorder.miss("p1")
    assert counts.degraded == {"fallback": 1}
    assert counts.degraded["stale"] == 0  # a label never recorded reads 0
    assert counts.misses == 0
    assert counts.hit_rate == 0.0
    with pytest.raises(TypeError):
        counts.degraded["fallback"] = 5  # type: ignore[index]
    assert recorder.snapshot().degraded == {"fallback": 2}


def test_labels_are_the_strings_the_stats_always_had() -> None:
    assert [str(r) for r in NotStoredReason] == [
        "error",
        "bad_body",
        "incomplete",
        "no_store",
        "too_large",
        "no_choices",
        "unfinished",
        "length",
        "content_filter",
    ]
    assert [str(g) for g in GuardName] == [
        "answers",
        "language",
        "negation",
        "antonym",
        "number",
        "entity",
        "question",
        "role",
    ]


@pytest.mark.parametrize(
    ("reason", "guard"),
    [
        ("language: a text the pipeline cannot read", GuardName.LANGUAGE),
        ("negation: 1 vs 0 negators", GuardName.NEGATION),
        ("antonym: open/closed", GuardName.ANTONYM),
        ("number: 3 in one text only", GuardName.NUMBER),
        ("entity: 'Paris' not in the other text", GuardName.ENTITY),
        ("question: asks ['time'] vs ['place']", GuardName.QUESTION),
        ("role: 'dog' and 'man' exchanged roles", GuardName.ROLE),
    ],
)
def test_a_guard_is_named_by_its_reasons_first_word(reason: str, guard: GuardName) -> None:
    assert GuardName.of_reason(reason) is guard


def test_taking_the_served_counts_leaves_zero_and_the_rest_alone() -> None:
    front = CacheRecorder()
    front.hit("lru_k", "exact", 7, 3, 0.125)
    front.tier_error("redis")
    front.miss("p1")
    front.stored()
    taken = front.take_served()
    assert taken == ServedCounts({("lru_k", "exact"): 1}, {"redis": 1}, 7, 3, 0.125)
    assert not taken.empty
    assert front.take_served().empty
    counts = front.snapshot()
    assert (counts.hits, counts.tier_errors, counts.prompt_tokens_saved) == ({}, {}, 0)
    assert (counts.completion_tokens_saved, counts.usd_saved) == (0, 0.0)
    assert (counts.misses, counts.stores) == (1, 1)  # not the front's to hand over


def test_added_served_counts_add_to_what_was_counted() -> None:
    worker = CacheRecorder()
    worker.hit("lru_k", "exact", 1, 1, 0.5)
    worker.tier_error("redis")
    worker.add_served(ServedCounts({("lru_k", "exact"): 2, ("redis", "exact"): 1}, {"redis": 3}))
    worker.add_served(ServedCounts(prompt_tokens_saved=4, completion_tokens_saved=5, usd_saved=1))
    counts = worker.snapshot()
    assert counts.hits == {("lru_k", "exact"): 3, ("redis", "exact"): 1}
    assert counts.tier_errors == {"redis": 4}
    assert (counts.prompt_tokens_saved, counts.completion_tokens_saved) == (5, 6)
    assert counts.usd_saved == 1.5


def test_a_fronts_report_merges_into_the_workers_counts() -> None:
    class NoRequests:
        def observe_request(self, route: str, cache: str, status: int, seconds: float) -> None:
            raise AssertionError("the report observed no requests")

    worker = CacheRecorder()
    worker.hit("redis", "exact", 2, 2, 0.0)
    report: dict[str, Any] = {
        "v": 2,
        "observed": [],
        "served": [],
        "hits": [["lru_k", "exact", 4], ["redis", "exact", 1]],
        "tier_errors": {"redis": 2},
        "prompt_tokens_saved": 40,
        "completion_tokens_saved": 8,
        "usd_saved": 0.25,
    }
    EdgeReportReceiver(NoRequests(), worker, ServedRequests(capacity=0)).apply(report)
    counts = worker.snapshot()
    assert counts.hits == {("lru_k", "exact"): 4, ("redis", "exact"): 2}
    assert counts.tier_errors == {"redis": 2}
    assert (counts.prompt_tokens_saved, counts.completion_tokens_saved) == (42, 10)
    assert counts.usd_saved == 0.25
