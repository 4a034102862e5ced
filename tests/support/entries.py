"""Entries for tests: one builder, every field overridable by name."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from normalize.keys.request import Route
from tiers.base import Entry

TAG = "0" * 16  # a partition tag (the first 16 hex digits of the partition hash)


def make_entry(name: str = "e1", **changes: Any) -> Entry:
    """An entry with id `TAG-name` under exact key `TAG + name`, fresh for 300 s from a fixed
    time; `changes` replace any field."""
    entry = Entry(
        entry_id=f"{TAG}-{name}",
        route=Route.CHAT,
        tenant="t",
        namespace="",
        model="m",
        partition=TAG + "p" * 48,
        exact_key=TAG + name,
        lemma_key=None,
        body=b'{"choices":[]}',
        stored_at=1_700_001_000.0,
        ttl_s=300.0,
        grace_s=60.0,
    )
    return replace(entry, **changes)
