"""The graph of long-lived parts, built once from a DejaConfig and a clock, and frozen.

    RequestParts   credential rule (the tenant hasher), client auth, prompt screen
    StoreParts     the recorder, LRU-K, Redis, the semantic index and its models, replication,
                   the cache service over them
    UpstreamParts  the pooled client, breaker, admission, gate, singleflight registry, lanes
    ProxyParts     the whole proxy (single process, and edge mode's worker)
    FrontParts     edge mode's front

Each part is built before the parts that use it, so nothing is filled in after construction
and no field has a default that builds something. What changes at run time (start-up finished
or failed) lives in `Readiness`, on its own.

Parts that are turned off are their "off" values here (no Redis: no Redis tier and no
replication; breaker off: AlwaysClosedBreaker; semantic off: no models and no index), so no code
below tests a flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from core.activity_series import ActivitySeries
from core.clock import Clock
from core.config import DejaConfig
from core.embedding_models import scale_anchors
from core.pacing import LoopTurns
from core.recorder import CacheRecorder
from core.tracing import StageTracer
from fallback.breaker import AlwaysClosedBreaker, Breaker, CircuitBreaker
from normalize.keys.screen import PromptScreen
from proxy.answering.admission import AdmissionControl
from proxy.answering.answer_store import AnswerStore
from proxy.answering.entry_builder import EntryBuilder
from proxy.answering.feedback import ServedRequests
from proxy.answering.flights import FlightRegistry
from proxy.answering.gate import UpstreamGate
from proxy.answering.miss_learning import MissLearner
from proxy.answering.store_rule import StoreRule
from proxy.answering.verifier import Verifier
from proxy.composition.readings import readings_of
from proxy.edge.report import EdgeReport
from proxy.edge.without_worker import DirectUpstream, NoWorkerFallback, WithoutWorker
from proxy.edge.worker_link import TcpRoute, WorkerLink, client_tls
from proxy.edge.worker_pool import WorkerPool
from proxy.edge.worker_process import WorkerProcess
from proxy.http.access_log import AccessLog, NoAccessLog
from proxy.http.client_auth import ClientAuth
from proxy.http.finished_requests import AccessLogWriter, RequestLedger, RequestObservers
from proxy.http.recent_misses import RecentMisses
from proxy.http.telemetry import Telemetry
from proxy.http.traces import build_tracer
from proxy.protocol.credentials import CredentialRule
from proxy.upstream.aiohttp_transport import AiohttpTransport
from proxy.upstream.client import UpstreamClient
from tiers.base import CacheTier
from tiers.lru_k import LruKTier
from tiers.policies.rescoring import RescoreBand
from tiers.policies.similarity_scale import SimilarityScale
from tiers.policies.thresholds import HitSwitch, ThresholdController
from tiers.policies.ttl import TtlPolicy
from tiers.redis_connection import RedisConnection
from tiers.redis_tier import RedisTier
from tiers.replication import StreamCursor, StreamReplication, stream_key
from tiers.semantic.protocol import NullSemanticIndex
from tiers.service import CacheService

if TYPE_CHECKING:
    # Only for annotations. The semantic parts load spaCy, torch and FAISS, which a proxy
    # without the semantic tier never needs (build_store imports them when it is on); only
    # proxy/http/telemetry.py imports OpenTelemetry at run time.
    from opentelemetry.sdk.trace.export import SpanExporter

    from normalize.runtime.model_features import SemanticFeatureSource
    from tiers.partition_loader import PartitionLoader
    from tiers.semantic.redis_search import RedisSearchIndex
    from tiers.semantic.tier import SemanticTier


class Readiness:
    """Starting until the models the config enables are loaded and the exact tiers answer;
    ready after that, until shutdown begins (partitions of the semantic index load in the
    background, on demand, and never hold it back). A start-up that failed stays not ready, with its
    error reported on /readyz (the proxy still serves exact matches)."""

    def __init__(self) -> None:
        self._ready = False
        self._error: str | None = None

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def error(self) -> str | None:
        return self._error

    def started(self) -> None:
        self._ready = True

    def failed(self, error: str) -> None:
        self._error = error

    def stopping(self) -> None:
        self._ready = False


@dataclass(frozen=True, slots=True)
class RequestParts:
    """How a client's request is read, the same in all three apps."""

    credential_rule: CredentialRule
    auth: ClientAuth
    screen: PromptScreen


@dataclass(frozen=True, slots=True)
class StoreParts:
    recorder: CacheRecorder
    lru: LruKTier | None
    redis: RedisConnection | None
    redis_tier: RedisTier | None
    # The similarity tier: FAISS in this replica (`semantic`), or Redis's own vector index
    # (`search`, semantic.backend redis-search); at most one of them.
    semantic: SemanticTier | None
    search: RedisSearchIndex | None
    features: SemanticFeatureSource | None
    replication: StreamReplication | None
    # With Redis and the semantic tier: which partitions the index holds, loading them on
    # demand (and snapshotting them); None otherwise (every partition given is held).
    partitions: PartitionLoader | None
    service: CacheService
    thresholds: ThresholdController
    # Whether lemma-key hits are served: their own false-hit estimate, fed by the verifier.
    lemma_hits: HitSwitch
    # The lookups' pacer (core/pacing.py): every step of a lookup past the exact tiers waits for
    # a turn of this lane, so exact hits are served in between. The handler passes it to
    # `CacheService.lookup`; the service and the semantic index keep none.
    lookup_turns: LoopTurns


@dataclass(frozen=True, slots=True)
class UpstreamParts:
    client: UpstreamClient
    breaker: Breaker
    admission: AdmissionControl
    gate: UpstreamGate
    flights: FlightRegistry
    # Storing an answer is spread out, one step per loop iteration of its own lane: a client
    # that repeats its question at once should find it stored, not wait behind lookups.
    store_turns: LoopTurns
    # A miss's own steps on the loop (sending it upstream, parsing a whole answer, writing it
    # to the client), one per loop iteration, in a lane of their own: a miss waits for a model
    # anyway.
    upstream_turns: LoopTurns


@dataclass(frozen=True, slots=True)
class ProxyParts:
    config: DejaConfig
    clock: Clock
    requests: RequestParts
    store: StoreParts
    upstream: UpstreamParts
    ttl: TtlPolicy
    entries: EntryBuilder
    # The one way an answer is stored: misses, warm-up lines and verification's fresh answers.
    answers: AnswerStore
    verifier: Verifier
    served: ServedRequests
    telemetry: Telemetry
    # The dashboard's last hour (sampled by a lifecycle task) and its last misses.
    series: ActivitySeries
    misses: RecentMisses
    # What counts a finished request: the metrics and the series (edge mode's worker hands its
    # fronts' requests to it too).
    observers: RequestObservers
    ledger: RequestLedger
    readiness: Readiness


@dataclass(frozen=True, slots=True)
class FrontParts:
    config: DejaConfig
    clock: Clock
    requests: RequestParts
    store: StoreParts
    link: WorkerLink
    # None when something else runs the worker (tests).
    worker: WorkerProcess | None
    report: EdgeReport
    ledger: RequestLedger
    # The front's spans are its own (a relayed request's stages are the worker's spans).
    tracer: StageTracer
    # With shared workers, what goes to the upstream while none answers, over `direct`.
    without: WithoutWorker
    direct: UpstreamClient | None


def build_request_parts(config: DejaConfig) -> RequestParts:
    rule = CredentialRule(config.proxy, config.cache)
    return RequestParts(
        credential_rule=rule,
        auth=ClientAuth(config.proxy, config.upstream, rule),
        screen=PromptScreen(config.guardrails.injection_patterns),
    )


def build_store(config: DejaConfig, clock: Clock, *, semantic_index: bool) -> StoreParts:
    """The tiers and the cache service over them. Without `semantic_index` (edge mode's
    front) no models load and no index is kept, whatever `semantic.enabled` says."""
    recorder = CacheRecorder(clock)
    lru = LruKTier(config.lru_k, clock) if config.lru_k.enabled else None
    local: list[CacheTier] = [lru] if lru is not None else []
    redis = RedisConnection(config.redis) if config.redis.url else None
    redis_tier = RedisTier(redis, config.redis) if redis is not None else None
    scale = SimilarityScale(config.semantic.threshold, scale_anchors(config.semantic))
    thresholds = ThresholdController(config.verify, config.semantic.threshold, scale)
    lemma_hits = HitSwitch(config.verify)
    lookup_turns = LoopTurns()
    features = semantic = search = None
    if semantic_index and config.semantic.enabled:
        # Imported here: spaCy, torch and FAISS are heavy, and a deployment without the
        # semantic tier should not pay for them.
        from normalize.meaning.guards import MeaningGuard
        from normalize.runtime.model_features import SemanticFeatureSource

        features = SemanticFeatureSource(config.semantic)
        rescoring = (
            RescoreBand(config.semantic.rescore_band, scale) if config.semantic.two_stage else None
        )
        guard = MeaningGuard(config.semantic)
        if config.semantic.backend == "redis-search":
            from tiers.semantic.judge import CandidateJudge
            from tiers.semantic.redis_search import RedisSearchIndex

            assert redis is not None, "semantic.backend redis-search is validated to have Redis"
            judge = CandidateJudge(config.semantic, guard, thresholds, recorder, rescoring)
            search = RedisSearchIndex(
                redis, config.redis, config.semantic, judge, thresholds, clock, recorder
            )
        else:
            from tiers.semantic.tier import SemanticTier

            semantic = SemanticTier(config.semantic, guard, thresholds, clock, recorder, rescoring)
    replication = partitions = None
    if redis is not None and redis_tier is not None:
        cursor = StreamCursor()
        if semantic is not None:
            from tiers.partition_loader import PartitionLoader
            from tiers.semantic.snapshot import SnapshotStore

            s = config.semantic
            snapshots = SnapshotStore(s.snapshot_dir, s) if s.snapshot_dir else None
            partitions = PartitionLoader(
                semantic, redis_tier, redis, stream_key(config.redis), s, cursor, snapshots, clock
            )
        replication = StreamReplication(
            redis,
            redis_tier,
            config.redis,
            local,
            semantic if semantic is not None else NullSemanticIndex(),
            indexes=semantic_index,
            partitions=partitions,
            cursor=cursor,
        )
    tiers: list[CacheTier] = [*local, *([redis_tier] if redis_tier is not None else [])]
    index = semantic if semantic is not None else search
    service = CacheService(
        tiers,
        clock,
        recorder,
        index,
        replication,
        lemma_hits,
        learning=index is not None and thresholds.learning,
        partitions=partitions,
    )
    return StoreParts(
        recorder=recorder,
        lru=lru,
        redis=redis,
        redis_tier=redis_tier,
        semantic=semantic,
        search=search,
        features=features,
        replication=replication,
        partitions=partitions,
        service=service,
        thresholds=thresholds,
        lemma_hits=lemma_hits,
        lookup_turns=lookup_turns,
    )


def build_upstream(config: DejaConfig, clock: Clock, tracer: StageTracer) -> UpstreamParts:
    u = config.upstream
    # The tracer's trace context goes with every upstream call (core/tracing.py).
    client = UpstreamClient(u, AiohttpTransport(u), clock=clock, tracer=tracer)
    breaker: Breaker = (
        CircuitBreaker(config.breaker, clock) if config.breaker.enabled else AlwaysClosedBreaker()
    )
    admission = AdmissionControl(u.max_concurrent, u.max_queued, u.queue_timeout_s)
    return UpstreamParts(
        client=client,
        breaker=breaker,
        admission=admission,
        gate=UpstreamGate(client, breaker, admission),
        flights=FlightRegistry(),
        store_turns=LoopTurns(),
        upstream_turns=LoopTurns(),
    )


def build_proxy(
    config: DejaConfig,
    clock: Clock,
    access_log_stream: BinaryIO,
    span_exporter: SpanExporter | None = None,
) -> ProxyParts:
    """The whole proxy's parts (single process, and edge mode's worker)."""
    store = build_store(config, clock, semantic_index=True)
    tracer = build_tracer(config.telemetry, span_exporter)
    upstream = build_upstream(config, clock, tracer)
    readiness = Readiness()
    ttl = TtlPolicy(config.ttl)
    telemetry = Telemetry(
        store.recorder, readings_of(store, upstream, readiness, config.verify), clock, tracer
    )
    entries = EntryBuilder(
        config.cache,
        config.degrade,
        config.semantic,
        ttl,
        store.thresholds,
        clock,
        store.features,
        store_prompts=config.admin.store_prompts,
    )
    series = ActivitySeries(clock, config.admin.series_interval_s, config.admin.series_window_s)
    observers = RequestObservers(telemetry, series)
    return ProxyParts(
        config=config,
        clock=clock,
        requests=build_request_parts(config),
        store=store,
        upstream=upstream,
        ttl=ttl,
        entries=entries,
        answers=AnswerStore(
            store.service,
            entries,
            StoreRule(config.cache.store_truncated),
            upstream.store_turns,
            telemetry.tracer,
            MissLearner(store.service, store.thresholds),
        ),
        verifier=Verifier(
            config.verify,
            upstream.gate,
            store.service,
            store.thresholds,
            store.lemma_hits,
            store.features,
        ),
        # Without the admin API nothing can name a served request: none is remembered.
        served=ServedRequests() if config.admin.token else ServedRequests(capacity=0),
        telemetry=telemetry,
        series=series,
        misses=RecentMisses(clock, config.admin.recent_misses),
        observers=observers,
        ledger=RequestLedger(observers, access_log(config, access_log_stream)),
        readiness=readiness,
    )


def build_front(
    config: DejaConfig,
    clock: Clock,
    access_log_stream: BinaryIO,
    link: WorkerLink,
    worker: WorkerProcess | None,
    span_exporter: SpanExporter | None = None,
) -> FrontParts:
    assert config.redis.url, "config validation requires redis.url with server.edge"
    store = build_store(config, clock, semantic_index=False)
    report = EdgeReport(link, store.recorder, served_enabled=bool(config.admin.token))
    requests = build_request_parts(config)
    direct = without = None
    if link.shared:
        direct = UpstreamClient(config.upstream, AiohttpTransport(config.upstream), clock=clock)
        without = DirectUpstream(direct, requests.auth)
    return FrontParts(
        config=config,
        clock=clock,
        requests=requests,
        store=store,
        link=link,
        worker=worker,
        report=report,
        ledger=RequestLedger(report, access_log(config, access_log_stream)),
        tracer=build_tracer(config.telemetry, span_exporter),
        without=without or NoWorkerFallback(),
        direct=direct,
    )


def shared_worker_link(config: DejaConfig, clock: Clock) -> WorkerLink:
    """A front's link to the shared workers of `edge.worker_urls`."""
    edge = config.edge
    tls = client_tls(edge.tls_ca) if edge.tls_ca else None
    pool = WorkerPool(edge, clock)
    return WorkerLink(TcpRoute(pool, edge.shared_secret, tls, edge.connect_timeout_s))


def access_log(config: DejaConfig, stream: BinaryIO) -> AccessLogWriter:
    return AccessLog(stream) if config.server.access_log else NoAccessLog()
