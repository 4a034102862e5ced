"""A fleet soak: three `deja serve` processes (semantic tier on, real models) sharing one Redis or
one six-node Redis Cluster, under minutes of steady mixed load (bench/soak_load.py: repeats,
paraphrases, new questions, feedback evictions, invalidations), one proxy restarted midway.

    python -m bench.soak [--minutes 10] [--redis single|cluster] [--rate 5]

Prints a table and writes bench/results/soak-<redis>.json. What it judges (`criteria` in the
JSON, all must hold):

- **errors**: no request of the load, feedback or invalidation answered other than 200, no
  connection failed (requests to a proxy are paused while it restarts, as a balancer would);
- **rss**: each proxy's RSS (summed over its process tree) at the end is within `rss_growth`
  (5%) of its RSS at the end of its warm-up (its first `--warmup-s`, 60 s; the restarted proxy's
  counted from its own restart; a generation that ran no full warm-up plus 30 s is not judged);
- **p99**: the last minute's p99 latency (all proxies) is within `p99_ratio` (1.5×) of the first
  minute's (the first minute is the cold one: partitions loading, nothing cached yet);
- **propagation**: after each feedback eviction and invalidation through one proxy, every proxy
  stopped serving the entry within 1 s (polled every 20 ms with lookups that store nothing);
- **partitions**: at the end, every partition a proxy was asked about (since its last start) is
  `held` (`/readyz?partition=`), and the entries its semantic index holds equal the live members
  of those partitions' Redis hashes (`deja:v1:{tag}:p`).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

from bench import soak_partitions
from bench.soak_fleet import Fleet, Slot
from bench.soak_load import Load, Questions, Sample
from bench.soak_partitions import SWEEP_S
from core.config import TtlConfig

RESULTS = Path(__file__).resolve().parent / "results"
RSS_GROWTH = 0.05
P99_RATIO = 1.5
SEEN_S = 1.0
# Entries live a minute (and 30 s of grace) instead of the default five (and an hour): the
# cache then stops growing within the warm-up, so RSS growth after it is what a leak would be,
# not the cache filling up.
TTL_S, GRACE_S = 60.0, 30.0


def steady_warmup_s(ttl_s: float, grace_s: float) -> float:
    """Long enough for the cache to reach its steady size: the longest an entry lives (its
    TTL at the largest factor and jitter, core/config.py TtlConfig, plus the grace), then one
    sweep to drop it from the semantic index, then 20 s."""
    ttl = TtlConfig()
    return ttl_s * ttl.factor_max * ttl.jitter_max + grace_s + SWEEP_S + 20.0


def run(
    minutes: float,
    backend: str,
    rate: float,
    warmup_s: float | None = None,
    event_every_s: float = 10.0,
    ttl_s: float = TTL_S,
    grace_s: float = GRACE_S,
) -> dict[str, Any]:
    warmup_s = steady_warmup_s(ttl_s, grace_s) if warmup_s is None else warmup_s
    fleet = Fleet(backend, lifetime_s=(ttl_s, grace_s)).start()
    try:
        started = time.monotonic()
        for slot in fleet.slots:
            slot.ready_at = started
        load = Load(fleet, started, rate, Questions(seed=21))
        threads = [threading.Thread(target=load.client, args=(s,)) for s in fleet.slots]
        threads.append(threading.Thread(target=load.prober, args=(event_every_s, 5.0)))
        for thread in threads:
            thread.start()
        duration = minutes * 60
        restart: dict[str, Any] = {}
        try:
            while (elapsed := load.now()) < duration:
                fleet.sample_rss(started)
                if not restart and elapsed >= duration / 2:
                    with load.probing:  # a probe in flight finishes first
                        at = load.now()
                        down_s = fleet.restart(fleet.slots[-1])
                    restart = {"slot": fleet.slots[-1].index, "at_s": round(at, 1)}
                    restart["down_s"] = round(down_s, 1)
                time.sleep(min(5.0, max(0.0, duration - load.now())))
            fleet.sample_rss(started)
        finally:
            load.stop.set()
            for thread in threads:
                thread.join()
        time.sleep(2.0)  # the last stores and replication events settle
        partitions = soak_partitions.check(fleet)
        result = _report(fleet, load, partitions, restart, minutes, backend, rate, warmup_s)
        return result | {"ttl_s": ttl_s, "grace_s": grace_s}
    finally:
        fleet.close()


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


def _minutes(samples: list[Sample], minutes: float) -> list[dict[str, Any]]:
    out = []
    for m in range(int(minutes + 0.999)):
        rows = [s for s in samples if m * 60 <= s.at_s < (m + 1) * 60]
        hits = sum(1 for s in rows if s.cache == "hit")
        out.append(
            {
                "minute": m + 1,
                "requests": len(rows),
                "hit_rate": round(hits / len(rows), 3) if rows else 0.0,
                "p50_ms": round(1000 * sorted(s.latency_s for s in rows)[len(rows) // 2], 1)
                if rows
                else 0.0,
                "p99_ms": round(1000 * _p99([s.latency_s for s in rows]), 1),
                # Which proxy and which outcome the slow requests were, when the p99 moved.
                "p99_ms_by_slot": {
                    str(slot): round(1000 * _p99([s.latency_s for s in rows if s.slot == slot]), 1)
                    for slot in sorted({s.slot for s in rows})
                },
                "p99_ms_by_cache": {
                    cache or "none": round(
                        1000 * _p99([s.latency_s for s in rows if s.cache == cache]), 1
                    )
                    for cache in sorted({s.cache for s in rows})
                },
            }
        )
    return out


def _rss(slot: Slot, warmup_s: float) -> dict[str, Any]:
    """RSS at the end of the generation's warm-up and at the end, MiB, and the growth."""
    samples = slot.rss
    if not samples:
        return {"slot": slot.index, "generation": slot.generation, "judged": False}
    first_t = samples[0][0]
    after = [(t, r) for t, r in samples if t >= first_t + warmup_s]
    judged = bool(after) and samples[-1][0] - after[0][0] >= 30.0
    base = after[0][1] if after else samples[0][1]
    end = samples[-1][1]
    return {
        "slot": slot.index,
        "generation": slot.generation,
        "judged": judged,
        "warm_mib": round(base / 2**20, 1),
        "end_mib": round(end / 2**20, 1),
        "growth": round(end / base - 1, 4),
        "by_process": _rss_by_process(slot.rss_parts, after[0][0] if after else first_t),
    }


def _rss_by_process(
    parts: list[tuple[float, dict[str, int]]], warm_at: float
) -> dict[str, dict[str, float]]:
    """Each process's RSS (MiB) when the warm-up ended and at the end."""
    if not parts:
        return {}
    warm = next((p for t, p in parts if t >= warm_at), parts[0][1])
    end = parts[-1][1]
    return {
        name: {
            "warm_mib": round(warm.get(name, 0) / 2**20, 1),
            "end_mib": round(rss / 2**20, 1),
        }
        for name, rss in end.items()
    }


def _report(
    fleet: Fleet,
    load: Load,
    partitions: list[dict[str, Any]],
    restart: dict[str, Any],
    minutes: float,
    backend: str,
    rate: float,
    warmup_s: float,
) -> dict[str, Any]:
    per_minute = _minutes(load.samples, minutes)
    rss = [_rss(slot, warmup_s) for slot in fleet.slots]
    seen = [t for p in load.probes for t in p.seen_s.values()]
    by_kind = {
        kind: {
            "requests": len(rows := [s for s in load.samples if s.kind == kind]),
            "hit_rate": round(sum(s.cache == "hit" for s in rows) / len(rows), 3) if rows else 0,
        }
        for kind in ("repeat", "paraphrase", "new")
    }
    duration = minutes * 60
    first = round(1000 * _p99([s.latency_s for s in load.samples if s.at_s < 60]), 1)
    last = round(1000 * _p99([s.latency_s for s in load.samples if s.at_s >= duration - 60]), 1)
    criteria = {
        "errors": not load.failures,
        "rss": all(r["growth"] <= RSS_GROWTH for r in rss if r["judged"]),
        "p99": last <= P99_RATIO * first,
        "propagation": bool(seen) and max(seen) <= SEEN_S and all(not p.error for p in load.probes),
        "partitions": all(not p["not_held"] and p["agrees"] for p in partitions),
    }
    return {
        "minutes": minutes,
        "redis": backend,
        "proxies": len(fleet.slots),
        "rate_per_proxy": rate,
        "warmup_s": warmup_s,
        "requests": len(load.samples),
        "errors": load.failures[:50],
        "error_count": len(load.failures),
        "by_kind": by_kind,
        "per_minute": per_minute,
        "first_minute_p99_ms": first,
        "last_minute_p99_ms": last,
        "p99_ratio_last_first": round(last / first, 3) if first else None,
        "rss": rss,
        "restart": restart,
        "probes": {
            "count": len(load.probes),
            "feedback": sum(p.kind == "feedback" for p in load.probes),
            "invalidate": sum(p.kind == "invalidate" for p in load.probes),
            "max_seen_s": round(max(seen), 3) if seen else None,
            "median_seen_s": round(sorted(seen)[len(seen) // 2], 3) if seen else None,
            "errors": [p.error for p in load.probes if p.error],
            "each": [
                {
                    "at_s": round(p.at_s, 1),
                    "kind": p.kind,
                    "via": p.via,
                    "seen_s": {str(k): round(v, 3) for k, v in sorted(p.seen_s.items())},
                }
                for p in load.probes
            ],
        },
        "partitions": partitions,
        "criteria": criteria,
        "passed": all(criteria.values()),
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"soak: {result['proxies']} proxies, redis={result['redis']}, "
        f"{result['minutes']} min, {result['rate_per_proxy']} req/s per proxy, "
        f"{result['requests']} requests, {result['error_count']} errors",
        "minute  requests  hit rate  p50 ms  p99 ms",
    ]
    for m in result["per_minute"]:
        lines.append(
            f"{m['minute']:>6}  {m['requests']:>8}  {m['hit_rate']:>8.3f}  "
            f"{m['p50_ms']:>6.1f}  {m['p99_ms']:>6.1f}"
        )
    lines.append(
        f"p99: first minute {result['first_minute_p99_ms']} ms, last minute "
        f"{result['last_minute_p99_ms']} ms (ratio {result['p99_ratio_last_first']})"
    )
    lines.append("proxy  gen  judged  warm MiB  end MiB  growth")
    for r in result["rss"]:
        if "warm_mib" in r:
            lines.append(
                f"{r['slot']:>5}  {r['generation']:>3}  {r['judged']!s:>6}  "
                f"{r['warm_mib']:>8.1f}  {r['end_mib']:>7.1f}  {r['growth']:>+6.1%}"
            )
            for name, mib in r.get("by_process", {}).items():
                lines.append(f"         {name:<40} {mib['warm_mib']:>8.1f}  {mib['end_mib']:>7.1f}")
    probes = result["probes"]
    lines.append(
        f"probes: {probes['feedback']} feedback evictions, {probes['invalidate']} "
        f"invalidations; seen on every proxy within median {probes['median_seen_s']} s, "
        f"max {probes['max_seen_s']} s"
    )
    lines.append("proxy  asked  held  index entries  redis entries at its sweep")
    for p in result["partitions"]:
        lines.append(
            f"{p['slot']:>5}  {p['asked']:>5}  {p['held']:>4}  {p['index_entries']:>13}  "
            f"{p['redis_entries_low']:>13} – {p['redis_entries_high']}"
        )
    lines.append(f"restart: {result['restart']}")
    lines.append("criteria: " + ", ".join(f"{k}={v}" for k, v in result["criteria"].items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--redis", choices=("single", "cluster"), default="single")
    parser.add_argument("--rate", type=float, default=5.0, help="requests/s per proxy")
    parser.add_argument(
        "--ttl-s",
        type=float,
        default=TTL_S,
        help="ttl.base_ttl_s of the fleet: short, so that the cache reaches a steady size",
    )
    parser.add_argument("--grace-s", type=float, default=GRACE_S, help="degrade.stale_grace_s")
    parser.add_argument(
        "--warmup-s", type=float, default=None, help="default: until the cache is steady"
    )
    args = parser.parse_args()
    result = run(
        args.minutes,
        args.redis,
        args.rate,
        args.warmup_s,
        ttl_s=args.ttl_s,
        grace_s=args.grace_s,
    )
    print(table(result))
    print(f"wrote {write(result)}")


def write(result: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"soak-{result['redis']}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


if __name__ == "__main__":
    main()
