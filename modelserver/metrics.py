"""`/metrics`: the engine's stats snapshot in Prometheus text format.

The engine records plain counters (`EngineStats`); this module, the only one importing
prometheus_client, turns a snapshot into metric families at scrape time, in a registry of its own
(no process-global default registry, so two servers in one test process do not collide).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from modelserver.engine import EngineStats

PREFIX = "deja_modelserver_"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EngineStatsCollector(Collector):
    def __init__(self, read_stats: Callable[[], EngineStats]) -> None:
        self._read_stats = read_stats

    def collect(self) -> Iterator[Metric]:
        stats = self._read_stats()
        hit_rate = (
            stats.num_hit_tokens / stats.num_queried_tokens if stats.num_queried_tokens else 0.0
        )
        yield _gauge(
            "prefix_cache_hit_rate",
            "Prompt tokens served from the prefix cache, as a share of prompt tokens looked up",
            hit_rate,
        )
        yield _counter(
            "prefix_cache_queried_tokens",
            "Prompt tokens looked up in the prefix cache",
            stats.num_queried_tokens,
        )
        yield _counter(
            "prefix_cache_hit_tokens",
            "Prompt tokens served from the prefix cache",
            stats.num_hit_tokens,
        )
        blocks = GaugeMetricFamily(
            PREFIX + "kv_blocks",
            "KV blocks by state: used (held by a sequence), free (held by none; allocation "
            "takes these), cached (findable by hash, used or free)",
            labels=["state"],
        )
        blocks.add_metric(["used"], stats.num_used_blocks)
        blocks.add_metric(["free"], stats.num_free_blocks)
        blocks.add_metric(["cached"], stats.num_cached_blocks)
        yield blocks
        # Not "kv_blocks_total": `_total` is a counter's suffix (Prometheus naming conventions).
        yield _gauge(
            "kv_pool_blocks", "KV blocks in the pool, whatever their state", stats.num_blocks
        )
        yield _gauge(
            "kv_pool_usage_ratio",
            "KV blocks held by a sequence over the blocks in the pool",
            stats.num_used_blocks / stats.num_blocks if stats.num_blocks else 0.0,
        )
        yield _counter(
            "kv_block_evictions", "Cached blocks reused for new tokens", stats.num_evictions
        )
        yield _gauge("queue_depth", "Requests waiting for admission", stats.num_waiting)
        yield _gauge("running_requests", "Requests being computed", stats.num_running)
        yield _gauge(
            "generation_tokens_per_second",
            "Generated tokens per second over the last 10 s of steps",
            stats.generation_tokens_per_s,
        )
        yield _counter("prompt_tokens", "Prompt tokens received", stats.num_prompt_tokens)
        yield _counter("generation_tokens", "Tokens generated", stats.num_generated_tokens)
        yield _counter("requests_finished", "Requests that ran to their end", stats.num_finished)
        yield _counter(
            "requests_aborted", "Requests whose client went away first", stats.num_aborted
        )
        yield _counter(
            "preemptions",
            "Running sequences sent back to the queue for lack of blocks",
            stats.num_preemptions,
        )
        yield _counter("engine_steps", "Scheduler steps run", stats.num_steps)
        yield _gauge("engine_alive", "1 while the engine thread serves", int(stats.alive))


def render_metrics(read_stats: Callable[[], EngineStats]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineStatsCollector(read_stats))
    return generate_latest(registry)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, documentation, value=value)
