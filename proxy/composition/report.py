"""What the proxy reports about its parts: /readyz's body and the admin API's stats (the
metrics' readings are proxy/composition/readings.py's). The routes get these as callables,
never the parts themselves."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from core.activity_series import SeriesState
from normalize.keys.request import PARTITION_TAG_CHARS

if TYPE_CHECKING:  # the parts import this module to give their telemetry its gauges
    from proxy.composition.parts import ProxyParts, StoreParts


def readiness_report(
    parts: ProxyParts,
) -> Callable[[str | None], tuple[bool, dict[str, Any]]]:
    """/readyz: whether start-up is done, and the state of what it depends on."""
    return lambda partition: readiness(parts, partition)


def readiness(parts: ProxyParts, partition: str | None = None) -> tuple[bool, dict[str, Any]]:
    """`partition`: a partition's tag (or an entry id, which starts with it) to report on."""
    store, b = parts.store, parts.upstream.breaker.snapshot()
    report: dict[str, Any] = {
        "upstream": parts.config.upstream.url,
        "breaker": {
            "state": str(b.state),
            "failures_in_window": b.failures_in_window,
            "requests_in_window": b.requests_in_window,
            "trips": b.trips,
            "retry_after_s": b.retry_after_s,
        },
        "redis": _redis(parts),
        "semantic": {
            "enabled": parts.config.semantic.enabled,
            "backend": parts.config.semantic.backend,
            "models_loaded": store.features.ready if store.features is not None else False,
            "entries": store.semantic.size() if store.semantic is not None else 0,
            **_partitions(store, partition),
        },
    }
    if parts.readiness.error is not None:
        report["error"] = parts.readiness.error
    return parts.readiness.ready, report


def _partitions(store: StoreParts, asked: str | None) -> dict[str, Any]:
    """The partitions the semantic index holds (a count: there may be many) and those loading
    (by tag), with Redis; and the state of the one `asked` about."""
    loader = store.partitions
    if loader is None:
        return {}
    report: dict[str, Any] = {
        "held": len(loader.held()),
        "loading": loader.loading(),
        "loaded_from_snapshot": loader.loaded_from_snapshot,
        "loaded_from_redis": loader.loaded_from_redis,
        "dropped": loader.dropped,
    }
    if asked is not None:
        tag = asked[:PARTITION_TAG_CHARS]
        report["partition"] = {"tag": tag, "state": loader.state(tag) or "not held"}
    return {"partitions": report}


def models_ready(parts: ProxyParts) -> Callable[[], bool]:
    """Whether what a warm-up line needs is loaded (always, without the semantic tier)."""
    return lambda: parts.store.features is None or parts.readiness.ready


def stats_report(parts: ProxyParts) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The admin API's stats."""

    async def report() -> dict[str, Any]:
        return await stats(parts)

    return report


async def stats(parts: ProxyParts) -> dict[str, Any]:
    store, s = parts.store, parts.store.recorder.snapshot()
    hits: dict[str, dict[str, int]] = {}
    for (tier, match), n in s.hits.items():
        hits.setdefault(tier, {})[match] = n
    thresholds = store.thresholds
    estimate = thresholds.estimator.estimate()
    breaker = parts.upstream.breaker.snapshot()
    sizes: dict[str, Any] = {"semantic_entries": store.semantic.size() if store.semantic else 0}
    if store.partitions is not None:
        sizes["semantic_partitions_held"] = len(store.partitions.held())
        sizes["semantic_partitions_loading"] = store.partitions.loading()
    if store.lru is not None:
        sizes["lru_k_entries"] = await store.lru.count()
        sizes["lru_k_bytes"] = store.lru.bytes_used
    return {
        "requests": {
            "hits": s.total_hits,
            "misses": s.misses,
            "bypasses": s.bypasses,
            "hit_rate": s.hit_rate,
        },
        "hits": hits,
        "stores": s.stores,
        "coalesced": s.coalesced,
        "degraded": dict(s.degraded),
        "not_stored": dict(s.not_stored),
        "guard_rejections": dict(s.guard_rejections),
        "evictions_by_feedback": s.evictions_by_feedback,
        "sizes": sizes,
        "saved": {
            "prompt_tokens": s.prompt_tokens_saved,
            "completion_tokens": s.completion_tokens_saved,
            "usd": round(s.usd_saved, 6),
        },
        "false_hits": {
            "verified": estimate.verified,
            "wrong": estimate.wrong,
            "rate": estimate.rate,
            "interval_95": [estimate.low, estimate.high],
            "target": parts.config.verify.target_false_hit_rate,
            "global_threshold": thresholds.global_threshold,
            "complaints": thresholds.complaints,
            # Fresh answers of failed verifications stored for their prompts.
            "fresh_answers_kept": parts.verifier.kept,
        },
        "false_hits_lemma": _lemma_false_hits(parts),
        "false_hits_learned": _learned_false_hits(parts),
        "breaker": {"state": str(breaker.state), "trips": breaker.trips},
        "redis": _redis(parts),
    }


def _lemma_false_hits(parts: ProxyParts) -> dict[str, Any]:
    """The lemma-key hits' own estimate, beside the semantic one, and whether they are served."""
    switch = parts.store.lemma_hits
    estimate = switch.estimator.estimate()
    return {
        "verified": estimate.verified,
        "wrong": estimate.wrong,
        "rate": estimate.rate,
        "interval_95": [estimate.low, estimate.high],
        "target": parts.config.verify.target_false_hit_rate,
        "serving": switch.serving,
        # Served before their answer check could run, refused by it afterwards (lemma key
        # dropped); and served with no check at all, the late checks' pool being full.
        "refused_after_serving": switch.refused_after_serving,
        "unchecked": parts.verifier.late_checks_skipped,
    }


def _learned_false_hits(parts: ProxyParts) -> dict[str, Any]:
    """The estimate of hits served through a learned threshold, and the near-misses that
    taught (agreed) or reset (disagreed) learned thresholds."""
    thresholds = parts.store.thresholds
    estimate = thresholds.learned_hits.estimator.estimate()
    return {
        "verified": estimate.verified,
        "wrong": estimate.wrong,
        "rate": estimate.rate,
        "interval_95": [estimate.low, estimate.high],
        "target": parts.config.verify.target_false_hit_rate,
        "near_misses_agreed": thresholds.near_misses_agreed,
        "near_misses_disagreed": thresholds.near_misses_disagreed,
        "serving": thresholds.learned_hits.serving,
    }


def _redis(parts: ProxyParts) -> dict[str, bool]:
    redis = parts.store.redis
    return {
        "configured": redis is not None,
        "available": redis.available if redis is not None else False,
    }


def series_state(parts: ProxyParts) -> SeriesState:
    """What the dashboard's series notes at each sample, besides the counts."""
    store = parts.store
    estimate = store.thresholds.estimator.estimate()
    sizes: dict[str, float] = {
        "semantic_entries": store.semantic.size() if store.semantic is not None else 0
    }
    if store.lru is not None:
        sizes["lru_k_bytes"] = store.lru.bytes_used
    return SeriesState(
        global_threshold=store.thresholds.global_threshold,
        false_hit_rate=estimate.rate,
        false_hit_low=estimate.low,
        false_hit_high=estimate.high,
        false_hit_target=parts.config.verify.target_false_hit_rate,
        verified_hits=estimate.verified,
        breaker_state=str(parts.upstream.breaker.snapshot().state),
        redis_up=store.redis.available if store.redis is not None else None,
        sizes=sizes,
    )


def series_report(parts: ProxyParts) -> Callable[[], dict[str, Any]]:
    """The admin API's series: this process's samples over the last window, oldest first.
    The points stay dataclasses: orjson encodes those natively (an hour of 10 s points in about
    1 ms, where `dataclasses.asdict` first took 40 ms of the event loop)."""

    def report() -> dict[str, Any]:
        series = parts.series
        return {
            "interval_s": series.interval_s,
            "window_s": series.window_s,
            "points": list(series.points()),
        }

    return report


def misses_report(parts: ProxyParts) -> Callable[[], dict[str, Any]]:
    """The admin API's recent misses, newest first, with why they missed."""
    return lambda: {"misses": list(parts.misses.newest_first())}
