"""The soak's last check: each proxy's semantic index against Redis's partition hashes.

Entries expire during the soak (its short TTL keeps the cache at a steady size), and a proxy
drops expired vectors in its sweep, every `SWEEP_S` (proxy/composition/lifecycle.py), so its
count is Redis's live count as of its last sweep, not as of now. Once the load has stopped
nothing is stored or pruned, so the expiries in the partitions' hashes, read once, give Redis's
live count at any moment: L(t), the ids whose expiry is after t. Each proxy's count is then
polled for a sweep interval and a little more. The first time it falls, a sweep ran between two
polls, and the count must lie between L at the later poll and L at the earlier one: a window of
the entries that expired in one poll interval. A proxy whose count never fell (nothing expired
meanwhile) must hold L at the last poll, exactly.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from typing import Any

from bench.soak_fleet import Fleet, Slot
from proxy.composition.lifecycle import SWEEP_INTERVAL_S as SWEEP_S
from tests.support.blocking_http import http


@dataclass(frozen=True, slots=True)
class Expiries:
    """The live ids' expiries (wall-clock seconds, sorted) of each partition, as Redis holds
    them once nothing writes."""

    by_tag: dict[str, list[float]]

    def live(self, tags: list[str], at_s: float) -> int:
        return sum(
            len(times) - bisect.bisect_right(times, at_s)
            for tag in tags
            for times in [self.by_tag.get(tag, [])]
        )


def read_expiries(fleet: Fleet, tags: set[str]) -> Expiries:
    client = fleet.redis_client()
    try:
        by_tag = {}
        for tag in tags:
            members = client.hgetall(f"deja:v1:{{{tag}}}:p")
            # "~max" and "~cur" are the hash's own fields, not entries.
            by_tag[tag] = sorted(float(v) / 1000 for k, v in members.items() if k[:1] != b"~")
    finally:
        client.close()
    return Expiries(by_tag)


def _held(slot: Slot) -> tuple[list[str], list[str]]:
    states = {
        tag: http(slot.server, "GET", f"/readyz?partition={tag}").body["semantic"]["partitions"][
            "partition"
        ]["state"]
        for tag in sorted(slot.tags)
    }
    held = [t for t, state in states.items() if state == "held"]
    return held, [t for t in states if t not in held]


def _entries(slot: Slot) -> int:
    return int(http(slot.server, "GET", "/readyz").body["semantic"]["entries"])


def check(fleet: Fleet, poll_s: float = 0.5) -> list[dict[str, Any]]:
    """Per proxy: which partitions it was asked about it holds, and its index's entry count
    against Redis's live count at its sweep (see the module's doc)."""
    expiries = read_expiries(fleet, set().union(*(s.tags for s in fleet.slots)))
    held = {slot.index: _held(slot) for slot in fleet.slots}
    last: dict[int, tuple[float, int]] = {}  # slot → (when read, count) at the previous poll
    window: dict[int, tuple[int, int, int]] = {}  # slot → (low, count, high) at its first sweep
    deadline = time.time() + SWEEP_S + 5.0
    while time.time() < deadline and len(window) < len(fleet.slots):
        for slot in fleet.slots:
            if slot.index in window:
                continue
            tags = held[slot.index][0]
            count, at_s = _entries(slot), time.time()
            if slot.index in last and count < last[slot.index][1]:
                before_s = last[slot.index][0]
                window[slot.index] = (
                    expiries.live(tags, at_s),
                    count,
                    expiries.live(tags, before_s - poll_s),
                )
            last[slot.index] = (at_s, count)
        time.sleep(poll_s)
    out = []
    for slot in fleet.slots:
        tags, not_held = held[slot.index]
        if slot.index in window:
            low, count, high = window[slot.index]
        else:  # nothing expired between its sweeps: it holds exactly what Redis holds now
            at_s, count = last[slot.index]
            low = high = expiries.live(tags, at_s)
        out.append(
            {
                "slot": slot.index,
                "asked": len(slot.tags),
                "held": len(tags),
                "not_held": not_held,
                "index_entries": count,
                "redis_entries_low": low,
                "redis_entries_high": high,
                "agrees": low <= count <= high,
            }
        )
    return out
