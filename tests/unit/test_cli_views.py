"""What the `deja` commands print, from given answers: stats, durations, warm-up summaries."""

from __future__ import annotations

import io

import pytest

from proxy.cli.admin_client import AdminError, WarmedLine, admin_base
from proxy.cli.output import confirmed, duration, masked, table
from proxy.cli.stats_view import render_stats
from proxy.cli.warmup_command import ProgressBar, Tally


def test_stats_print_known_topics_and_keep_unknown_ones() -> None:
    text = render_stats(
        {
            "requests": {"hits": 1200, "misses": 300, "bypasses": 0, "hit_rate": 0.8},
            "hits": {"redis": {"lemma": 2, "exact": 5}, "lru_k": {"exact": 1193}},
            "stores": 300,
            "not_stored": {"length": 2},
            "evictions_by_feedback": 1,
            "saved": {"prompt_tokens": 12000, "completion_tokens": 3400, "usd": 12.5},
            "redis": {"configured": True, "available": False},
            "queue": {"depth": 3},  # a topic this view does not know yet
        },
        "http://deja:8080",
    )
    assert text.splitlines() == [
        "Proxy             http://deja:8080",
        "Requests          1,200 hits, 300 misses, 0 bypasses; hit rate 80.0%",
        "Hits by tier      lru_k (exact 1,193); redis (exact 5, lemma 2)",
        "Stored            300 answers",
        "Not stored        length 2",
        "Feedback evicted  1 entry",
        "Saved             12,000 prompt + 3,400 completion tokens, about $12.50",
        "Redis             UNAVAILABLE (serving without it)",
        'Queue             {"depth": 3}',
    ]


@pytest.mark.parametrize(
    "seconds,text",
    [(0.4, "0s"), (59, "59s"), (61, "1m 01s"), (3600, "1h 00m"), (90061, "1d 1h")],
)
def test_durations_keep_two_units(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_table_pads_every_column_but_the_last() -> None:
    assert table(["A", "LONG"], [["xyz", "1"], ["q", "22"]]).splitlines() == [
        "A    LONG",
        "xyz  1",
        "q    22",
    ]


def test_keys_are_masked_in_questions() -> None:
    assert (masked("sk-abcdefghijkl"), masked("short"), masked("")) == ("sk-…ijkl", "…", "")


@pytest.mark.parametrize(
    "answer,consent", [("y\n", True), ("YES\n", True), ("\n", False), ("", False), ("no\n", False)]
)
def test_only_yes_is_consent(answer: str, consent: bool) -> None:
    stderr = io.StringIO()
    assert confirmed("Delete?", io.StringIO(answer), stderr) is consent
    assert stderr.getvalue() == "Delete? [y/N] \n"


def test_warmup_refusals_are_grouped_by_reason_most_frequent_first() -> None:
    tally = Tally()
    for n in range(1, 10):
        tally.add(WarmedLine(n, None, "too big") if n > 2 else WarmedLine(n, f"e{n}", None))
    tally.add(WarmedLine(10, None, "not JSON"))
    tally.lines = 10
    assert tally.summary("pairs.jsonl").splitlines() == [
        "warm-up of pairs.jsonl: 10 lines, 2 stored, 8 refused",
        "  7 × too big (lines 3, 4, 5, 6, 7 and 2 more)",
        "  1 × not JSON (line 10)",
    ]


def test_the_progress_bar_without_a_known_total_counts() -> None:
    out = io.StringIO()
    tally = Tally(stored=3, refused=1)
    ProgressBar(None, out).update(tally, final=True)
    assert out.getvalue() == "\rwarming up 4 lines  stored 3  refused 1\n"
    out = io.StringIO()
    ProgressBar(8, out).update(tally, final=True)
    assert (
        out.getvalue()
        == "\rwarming up [" + "#" * 15 + "." * 15 + "] 4/8 lines  stored 3  refused 1\n"
    )


@pytest.mark.parametrize(
    "url,base",
    [
        ("http://h:8080", "http://h:8080/admin/v1"),
        ("http://h:8080/", "http://h:8080/admin/v1"),
        ("https://h/v1", "https://h/admin/v1"),
        ("http://h/deja/v1/", "http://h/deja/admin/v1"),
    ],
)
def test_the_admin_base_under_a_proxy_url(url: str, base: str) -> None:
    assert admin_base(url) == base


def test_a_url_without_a_scheme_is_refused() -> None:
    with pytest.raises(AdminError, match="must be http://host:port"):
        admin_base("localhost:8080")
