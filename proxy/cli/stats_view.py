"""`deja stats` as a person reads it: one labelled line per topic of GET /admin/v1/stats.

The stats body grows as the proxy learns to count more; a section this view does not know is
still printed (as compact JSON under its own name), and a section it knows but the proxy does
not send is left out, so an older or newer proxy never breaks the command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from proxy.cli.output import count, pairs, percent, size

Section = Callable[[Mapping[str, Any]], list[tuple[str, str]]]


def render_stats(stats: Mapping[str, Any], url: str) -> str:
    rows: list[tuple[str, str]] = [("Proxy", url)]
    known: set[str] = set()
    for keys, section in _SECTIONS:
        if keys[0] in stats:  # the others are optional parts of the same topic
            rows += section(stats)
            known.update(keys)
    for key, value in stats.items():
        if key not in known:
            rows.append((key.replace("_", " ").capitalize(), json.dumps(value, sort_keys=True)))
    return pairs(rows)


def _requests(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    r = stats["requests"]
    return [
        (
            "Requests",
            f"{count(r['hits'])} hits, {count(r['misses'])} misses, "
            f"{count(r['bypasses'])} bypasses; hit rate {percent(r['hit_rate'])}",
        )
    ]


def _hits(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    by_tier = stats["hits"]
    if not by_tier:
        return [("Hits by tier", "none yet")]
    parts = [
        f"{tier} ({', '.join(f'{match} {count(n)}' for match, n in sorted(matches.items()))})"
        for tier, matches in sorted(by_tier.items())
    ]
    return [("Hits by tier", "; ".join(parts))]


def _stores(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    stored = f"{count(stats['stores'])} answers"
    if stats.get("coalesced"):
        stored += f"; {count(stats['coalesced'])} misses coalesced"
    rows = [("Stored", stored)]
    for label, key in (
        ("Not stored", "not_stored"),
        ("Degraded", "degraded"),
        ("Guard refusals", "guard_rejections"),
    ):
        if stats.get(key):
            rows.append((label, _counts(stats[key])))
    if stats.get("evictions_by_feedback"):
        n = stats["evictions_by_feedback"]
        rows.append(("Feedback evicted", f"{count(n)} entr{'y' if n == 1 else 'ies'}"))
    return rows


def _sizes(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    s = stats["sizes"]
    parts = []
    if "lru_k_entries" in s:
        memory = f" ({size(s['lru_k_bytes'])})" if "lru_k_bytes" in s else ""
        parts.append(f"in process {count(s['lru_k_entries'])} entries{memory}")
    if "semantic_entries" in s:
        parts.append(f"semantic index {count(s['semantic_entries'])} entries")
    return [("Sizes", "; ".join(parts) or "nothing stored")]


def _saved(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    s = stats["saved"]
    return [
        (
            "Saved",
            f"{count(s['prompt_tokens'])} prompt + {count(s['completion_tokens'])} completion"
            f" tokens, about {_usd(s['usd'])}",
        )
    ]


def _false_hits(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for label, key in (
        ("False hits (semantic)", "false_hits"),
        ("False hits (lemma)", "false_hits_lemma"),
        ("False hits (learned)", "false_hits_learned"),
    ):
        estimate = stats.get(key)
        if not isinstance(estimate, Mapping):
            continue
        rows.append((label, _estimate(estimate)))
    return rows


def _estimate(e: Mapping[str, Any]) -> str:
    low, high = e.get("interval_95", (0.0, 1.0))
    text = (
        f"{percent(e['rate'])} of {count(e['verified'])} verified"
        f" (95% {percent(low)}–{percent(high)}, target {percent(e['target'])})"
    )
    if "global_threshold" in e:
        text += f"; threshold {e['global_threshold']:.3f}"
    if "serving" in e:
        text += "; served" if e["serving"] else "; NOT served (estimate above target)"
    return text


def _breaker(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    b = stats["breaker"]
    trips = b.get("trips", 0)
    return [("Upstream breaker", f"{b['state']} ({count(trips)} trips)")]


def _redis(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    r = stats["redis"]
    if not r.get("configured"):
        return [("Redis", "off (redis.url is empty)")]
    return [("Redis", "available" if r.get("available") else "UNAVAILABLE (serving without it)")]


def _usd(amount: float) -> str:
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.6f}"


def _counts(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {count(n)}" for name, n in sorted(counts.items()))


_SECTIONS: list[tuple[tuple[str, ...], Section]] = [
    (("requests",), _requests),
    (("hits",), _hits),
    (
        (
            "stores",
            "coalesced",
            "not_stored",
            "degraded",
            "guard_rejections",
            "evictions_by_feedback",
        ),
        _stores,
    ),
    (("sizes",), _sizes),
    (("saved",), _saved),
    (("false_hits", "false_hits_lemma", "false_hits_learned"), _false_hits),
    (("breaker",), _breaker),
    (("redis",), _redis),
]
