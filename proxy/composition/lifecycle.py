"""What each app starts and stops, one `cleanup_ctx` entry per resource.

aiohttp starts the entries in the order they are listed and closes them in reverse, and closes
only those that started. The order, the same for every app (what an app lacks, it skips):

    tracer / telemetry    shut down last: everything before it may still record a span
    edge worker process   (front) started first, so it loads while the front connects
    worker link           (front) shared workers' names resolved first
    direct upstream       (front, shared workers) for the misses while none answers
    upstream client       (proxy)
    Redis
    semantic index, models (proxy) closed once nothing uses them (the partitions held are
                          snapshotted first, with `semantic.snapshot_dir`)
    edge report           (front) handed to the worker while the link is open...
    access log / ledger   ...after the ledger drained the requests' last records into it
    background tasks      cancelled first: warm-up and replication, the dashboard's series,
                          sweeper, watchers
    verifier, flights     (proxy) in-flight work drained before anything it uses closes
    readiness             (proxy) not ready the moment shutdown begins

Start-up: the HTTP port opens at once (/healthz answers, exact matches are served); the models
load in the background (`warm_up`), and /readyz turns 200 when they are. With Redis, the
semantic index holds no partition at first: each loads when first asked about, in the
background (tiers/partition_loader.py), and /readyz lists those loading without waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from aiohttp import web

from core.errors import TierUnavailable
from proxy.composition.parts import FrontParts, ProxyParts, Readiness, StoreParts
from proxy.composition.report import series_state
from proxy.edge.worker_process import exit_with_parent
from proxy.http.traces import shutdown_tracer

if TYPE_CHECKING:  # only for annotations: the semantic parts load when the config asks
    from tiers.semantic.redis_search import RedisSearchIndex

CleanupContext = Callable[[web.Application], AsyncIterator[None]]

_GC_YOUNG_OBJECTS = 10_000
_log = logging.getLogger("deja.app")
SWEEP_INTERVAL_S = 30.0


def register(app: web.Application, resources: list[CleanupContext]) -> None:
    app.cleanup_ctx.extend(resources)


def proxy_resources(parts: ProxyParts, *, edge_worker: bool) -> list[CleanupContext]:
    """The whole proxy's. As edge mode's worker it also stops once its front is gone."""
    store, upstream = parts.store, parts.upstream
    resources = [
        closing(_sync(parts.telemetry.shutdown)),
        opening(upstream.client.start, upstream.client.close),
    ]
    if store.redis is not None:
        resources.append(opening(store.redis.start, store.redis.close))
    if store.semantic is not None:
        resources.append(closing(store.semantic.close))
    if store.partitions is not None:
        # Before the index closes: the held partitions are snapshotted.
        resources.append(closing(store.partitions.close))
    if store.features is not None:
        resources.append(closing(store.features.close))
    resources.append(closing(parts.ledger.close))
    resources.append(background(lambda: warm_up(store, parts.readiness), "deja-warm-up"))
    resources.append(background(lambda: sample_series(parts), "deja-series"))
    if store.semantic is not None:
        resources.append(background(lambda: sweep(store), "deja-sweeper"))
    if store.partitions is not None and parts.config.semantic.snapshot_dir:
        interval_s = parts.config.semantic.snapshot_interval_s
        resources.append(background(lambda: snapshots(store, interval_s), "deja-snapshots"))
    if edge_worker:
        parent = os.getppid()
        resources.append(background(lambda: exit_with_parent(parent), "deja-edge-parent"))
    grace_s = parts.config.server.shutdown_grace_s
    resources += [
        closing(parts.verifier.drain),
        closing(lambda: parts.upstream.flights.drain(grace_s)),
        closing(_sync(parts.readiness.stopping)),
    ]
    return resources


def front_resources(parts: FrontParts) -> list[CleanupContext]:
    """Edge mode's front's."""
    resources = [closing(_sync(lambda: shutdown_tracer(parts.tracer)))]
    worker = parts.worker
    if worker is not None:
        grace_s = parts.config.server.shutdown_grace_s
        resources.append(opening(_sync(worker.start), lambda: worker.stop(grace_s)))
    resources.append(opening(parts.link.start, parts.link.close))
    if parts.direct is not None:
        resources.append(opening(parts.direct.start, parts.direct.close))
    redis = parts.store.redis
    assert redis is not None, "the front reads what the worker stores from Redis"
    assert parts.store.replication is not None
    replication = parts.store.replication
    resources += [
        opening(redis.start, redis.close),
        closing(parts.report.flush),  # what the front served last still counts
        closing(parts.ledger.close),
        background(replication.follow, "deja-edge-replication"),
        background(parts.report.run, "deja-edge-report"),
    ]
    if worker is not None:
        resources.append(background(worker.watch, "deja-edge-worker-watch"))
    pool = parts.link.pool
    if pool is not None:
        resources.append(background(pool.run, "deja-edge-worker-names"))
    # As the whole proxy does once started (`warm_up`).
    resources.append(starting(_sync(settle_collector)))
    return resources


def opening(
    start: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]]
) -> CleanupContext:
    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await start()
        yield
        await close()

    return lifecycle


def starting(start: Callable[[], Awaitable[None]]) -> CleanupContext:
    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await start()
        yield

    return lifecycle


def closing(close: Callable[[], Awaitable[None]]) -> CleanupContext:
    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        yield
        await close()

    return lifecycle


def background(job: Callable[[], Coroutine[Any, Any, None]], name: str) -> CleanupContext:
    """A task that runs until the app stops (or ends by itself)."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(job(), name=name)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return lifecycle


def _sync(step: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        step()

    return run


async def warm_up(store: StoreParts, readiness: Readiness) -> None:
    """Load the models, note where the replication stream is, then follow the other replicas.
    Partitions of the semantic index load on demand from then on."""
    try:
        if store.partitions is not None:
            # The partitions held when the replica stopped, read back from their snapshots
            # while the models load (installed once they are).
            store.partitions.resume()
        if store.search is not None:
            await search_module_present(store.search)
        if store.features is not None and store.semantic is not None:
            await store.features.start()
            for language, dim in store.features.dims.items():
                store.semantic.set_dimension(dim, language)
            if store.features.rescore_dim:
                store.semantic.set_rescore_dimension(store.features.rescore_dim)
        if store.features is not None and store.search is not None:
            await store.features.start()
            # Redis's index for each model's vectors (semantic.backend redis-search).
            try:
                await store.search.start(store.features.dims, store.features.rescore_dim)
            except TierUnavailable as exc:
                _log.warning(
                    "redis is unreachable; its vector index follows when it is back: %s", exc
                )
        if store.partitions is not None:
            store.partitions.models_loaded()
        if store.replication is not None:
            try:
                await store.replication.bootstrap()
            except TierUnavailable as exc:
                # Redis is down: serve now, follow when it returns (follow() retries).
                _log.warning("could not reach the replication stream yet: %s", exc)
    except Exception as exc:  # noqa: BLE001 - reported on /readyz; the proxy serves exact matches
        readiness.failed(f"start-up failed: {exc!r}")
        _log.exception("start-up failed; serving exact matches only")
        return
    readiness.started()
    settle_collector()
    _log.info("ready")
    if store.replication is not None:
        await store.replication.follow()


async def search_module_present(search: RedisSearchIndex) -> None:
    """semantic.backend redis-search on a Redis without the search module: said now, on
    /readyz, not after the models have loaded. A Redis that is down is no such error: the
    index is created once it answers (`RedisSearchIndex.start`)."""
    try:
        await search.require_module()
    except TierUnavailable as exc:
        _log.warning("redis is unreachable; its search module is checked when it is back: %s", exc)


def settle_collector() -> None:
    """Once start-up is done (in the whole proxy and in edge mode's front)."""
    # Everything built so far lives as long as the process: move it out of the collector's
    # sight, so a full collection (which pauses the event loop) only walks request garbage.
    gc.collect()
    gc.freeze()
    # A young generation of 10,000 objects instead of 700: with many requests in flight, each
    # young collection promoted their live objects towards the old generation, which then
    # filled up and triggered full collections that walk every cached entry (tens of ms each
    # with 30,000 entries, a few times a second under load). Measured: GC time during LRU-K
    # hits on a filled cache fell from 2.8% to 0.4% of the run. Request garbage is nearly all
    # freed by reference counting; the memory test bounds what cycles may hold.
    gc.set_threshold(_GC_YOUNG_OBJECTS, 10, 10)


async def sample_series(parts: ProxyParts) -> None:
    """The dashboard's series: a sample every `admin.series_interval_s`."""
    series, recorder = parts.series, parts.store.recorder
    while True:
        await asyncio.sleep(series.interval_s)
        series.sample(recorder.snapshot(), series_state(parts))


async def sweep(store: StoreParts) -> None:
    """Expired vectors out, then partitions past the memory budget (entries the stream added
    count towards it as much as loads do)."""
    assert store.semantic is not None
    while True:
        await asyncio.sleep(SWEEP_INTERVAL_S)
        await store.semantic.sweep()
        if store.partitions is not None:
            await store.partitions.enforce_budget()


async def snapshots(store: StoreParts, interval_s: float) -> None:
    """Snapshot the held partitions that changed, every `interval_s`."""
    assert store.partitions is not None
    while True:
        await asyncio.sleep(interval_s)
        await store.partitions.save_all()
