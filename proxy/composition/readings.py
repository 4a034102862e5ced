"""The readings of the proxy's parts for /metrics: every gauge, and the counters that the
parts keep themselves (the cache's own counts are core/recorder.py's). The telemetry module
gets them as a callable, never the parts themselves.

Names follow Prometheus's conventions (README "Metrics"): a counter's name gains `_total` on
export, units end the name, labels take values from small fixed sets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from core.config import VerifyConfig
from core.readings import Reading, counter, gauge

if TYPE_CHECKING:  # the parts import this module to give their telemetry its readings
    from proxy.composition.parts import Readiness, StoreParts, UpstreamParts


def readings_of(
    store: StoreParts, upstream: UpstreamParts, readiness: Readiness, verify: VerifyConfig
) -> Callable[[], list[Reading]]:
    """The parts' readings for the proxy's metrics (read at every scrape)."""
    return lambda: readings(store, upstream, readiness, verify)


def readings(
    store: StoreParts, upstream: UpstreamParts, readiness: Readiness, verify: VerifyConfig
) -> list[Reading]:
    """Every gauge and part-kept counter of /metrics, with its HELP text (README "Metrics")."""
    breaker = upstream.breaker.snapshot()
    admission = upstream.admission
    r = [
        gauge(
            "ready", "1 once everything the config enables is loaded (as /readyz)", readiness.ready
        ),
        gauge("inflight_upstream_calls", "Upstream calls in progress", admission.active),
        gauge("queued_upstream_calls", "Upstream calls waiting for admission", admission.queued),
        counter(
            "admission_rejections",
            "Upstream calls refused with a 429: the admission queue was full or the wait timed out",
            admission.rejected,
        ),
        gauge(
            "breaker_open",
            "1 while the upstream circuit breaker is not closed",
            breaker.state != "closed",
        ),
        counter("breaker_trips", "Times the upstream circuit breaker opened", breaker.trips),
        gauge(
            "lifetime_hit_ratio",
            "Hits over hits and misses since the process started",
            store.recorder.snapshot().hit_rate,
        ),
        gauge(
            "lookup_turns_waiting",
            "Lookups waiting for an event-loop turn",
            store.lookup_turns.waiting,
        ),
        counter(
            "lookup_turns_granted",
            "Event-loop turns granted to lookups",
            store.lookup_turns.granted,
        ),
        gauge(
            "store_turns_waiting",
            "Stores waiting for an event-loop turn",
            upstream.store_turns.waiting,
        ),
        gauge(
            "upstream_turns_waiting",
            "Upstream calls waiting for an event-loop turn",
            upstream.upstream_turns.waiting,
        ),
        *_miss_spread(store),
        *_tiers(store),
        *_model_workers(store),
        *_false_hits(store, verify),
    ]
    return r


def _miss_spread(store: StoreParts) -> list[Reading]:
    spread = store.recorder.miss_spread
    return [
        gauge(
            "miss_partition_entropy",
            "Shannon entropy, in bits, of the partitions of the misses of the last"
            f" {spread.window_s:g} s; falls when one partition's misses flood in",
            spread.entropy_bits(),
        )
    ]


def _tiers(store: StoreParts) -> list[Reading]:
    r: list[Reading] = []
    if store.lru is not None:
        r.append(
            gauge("lru_k_bytes", "Bytes held by the in-process LRU-K tier", store.lru.bytes_used)
        )
        r.append(
            counter("lru_k_evictions", "Entries evicted from the LRU-K tier", store.lru.evictions)
        )
    if store.redis is not None:
        r.append(gauge("redis_up", "1 while Redis is reachable", store.redis.available))
        r.append(counter("redis_outages", "Times Redis became unreachable", store.redis.outages))
    if store.redis_tier is not None:
        raw, stored = store.redis_tier.body_bytes, store.redis_tier.stored_body_bytes
        r.append(
            counter(
                "entry_body_bytes",
                "Bytes of entry bodies written to Redis, before compression",
                raw,
            )
        )
        r.append(
            counter(
                "entry_stored_body_bytes",
                "Bytes of entry bodies written to Redis, as stored (compressed or not)",
                stored,
            )
        )
        r.append(
            gauge(
                "entry_compression_ratio",
                "Entry body bytes before over after compression, over the bodies this process"
                " wrote (1 before any)",
                raw / stored if stored else 1.0,
            )
        )
    if store.semantic is not None:
        r.append(gauge("semantic_entries", "Entries in the semantic index", store.semantic.size()))
        r.append(
            gauge(
                "semantic_partitions",
                "Partitions with a semantic index",
                store.semantic.partitions(),
            )
        )
        r.append(
            counter(
                "semantic_evictions",
                "Entries evicted from the semantic index",
                store.semantic.evictions,
            )
        )
        # Two-stage mode (semantic.rescore_model): the worker pool's own counters
        # (deja_model_worker_texts_total{pool="embedding_rescore"}) count the prompts it embedded.
        r.append(
            counter(
                "semantic_rescored",
                "Semantic candidates judged by the second model (two-stage mode)",
                store.semantic.rescored,
            )
        )
    if store.replication is not None:
        r.append(
            counter(
                "replication_events_applied",
                "Replication events applied from other replicas",
                store.replication.applied,
            )
        )
        r.append(
            counter(
                "replication_events_skipped",
                "Replication add and update events of partitions the semantic index does not hold",
                store.replication.skipped,
            )
        )
    return r + _partitions(store)


def _partitions(store: StoreParts) -> list[Reading]:
    """The semantic index's partitions on demand (with Redis; README "Partitions on demand")."""
    loader = store.partitions
    if loader is None:
        return []
    return [
        gauge(
            "semantic_partitions_held", "Partitions the semantic index holds", len(loader.held())
        ),
        gauge(
            "semantic_partitions_loading",
            "Partitions loading into the semantic index",
            len(loader.loading()),
        ),
        counter(
            "semantic_partition_loads",
            "Partitions loaded into the semantic index, by source",
            loader.loaded_from_snapshot,
            source="snapshot",
        ),
        counter(
            "semantic_partition_loads",
            "Partitions loaded into the semantic index, by source",
            loader.loaded_from_redis,
            source="redis",
        ),
        counter(
            "semantic_partitions_dropped",
            "Partitions dropped from the semantic index past semantic.max_memory_bytes",
            loader.dropped,
        ),
        counter(
            "semantic_snapshots_written", "Partition snapshots written", loader.snapshots_written
        ),
        counter(
            "semantic_snapshot_failures",
            "Partition snapshots that could not be written",
            loader.snapshot_failures,
        ),
    ]


def _model_workers(store: StoreParts) -> list[Reading]:
    if store.features is None or not store.features.ready:
        return []
    r: list[Reading] = []
    # pool: analysis, embedding, embedding_<language>: one per configured language.
    for pool, worker in store.features.process.workers.items():
        r += [
            counter(
                "model_worker_batches",
                "Batches the model worker pool ran",
                worker.batches,
                pool=pool,
            ),
            counter(
                "model_worker_texts",
                "Texts the model worker pool processed",
                worker.texts,
                pool=pool,
            ),
            counter(
                "model_worker_restarts",
                "Model worker processes restarted",
                worker.restarts,
                pool=pool,
            ),
            gauge(
                "model_worker_queued", "Lookup texts waiting for the pool", worker.queued, pool=pool
            ),
            gauge(
                "model_worker_background_queued",
                "Background texts waiting for the pool",
                worker.background_queued,
                pool=pool,
            ),
            counter(
                "model_worker_background_refused",
                "Background texts refused, the pool's queue being full",
                worker.background_refused,
                pool=pool,
            ),
        ]
    return r


def _false_hits(store: StoreParts, verify: VerifyConfig) -> list[Reading]:
    """Each kind of loose hit's false-hit estimate with its 95% interval, and the target the
    thresholds and switches steer them under."""
    r = [
        gauge(
            "false_hit_rate_target",
            "verify.target_false_hit_rate: the false-hit rate the thresholds aim under",
            verify.target_false_hit_rate,
        ),
        gauge(
            "semantic_threshold",
            "The global similarity threshold of semantic hits",
            store.thresholds.global_threshold,
        ),
        gauge("lemma_hits_on", "1 while lemma-key hits are served", store.lemma_hits.serving),
        gauge(
            "learned_hits_on",
            "1 while hits through learned thresholds are served",
            store.thresholds.learned_hits.serving,
        ),
    ]
    for suffix, kind, estimate in (
        ("", "semantic", store.thresholds.estimator.estimate()),
        ("_lemma", "lemma-key", store.lemma_hits.estimator.estimate()),
        ("_learned", "learned-threshold", store.thresholds.learned_hits.estimator.estimate()),
    ):
        r += [
            gauge(f"false_hit_rate{suffix}", f"Wrong over verified {kind} hits", estimate.rate),
            gauge(
                f"false_hit_rate{suffix}_low",
                f"Low end of the 95% interval of the {kind} false-hit rate",
                estimate.low,
            ),
            gauge(
                f"false_hit_rate{suffix}_high",
                f"High end of the 95% interval of the {kind} false-hit rate",
                estimate.high,
            ),
        ]
    r += [
        counter(
            "verified_hits",
            "Semantic hits whose answer was checked against the upstream",
            store.thresholds.estimator.estimate().verified,
        ),
        counter(
            "verified_lemma_hits",
            "Lemma-key hits whose answer was checked against the upstream",
            store.lemma_hits.estimator.estimate().verified,
        ),
        counter(
            "verified_learned_hits",
            "Hits through learned thresholds whose answer was checked",
            store.thresholds.learned_hits.estimator.estimate().verified,
        ),
    ]
    return r
