"""Deja's configuration: one frozen class per subsystem, every field defaulted.

Precedence, lowest to highest: the defaults here, the YAML file (`config/deja.yaml`), the
environment (`DEJA_<SECTION>__<KEY>`, e.g. `DEJA_REDIS__URL`), then command-line flags. The
whole tree is built once at start-up by `load_config` and passed down; nothing else reads the
environment.

Each key is declared once, with its default, its one-line doc and its simple bounds
(`setting`, core/settings.py); `config/deja.yaml` and the README's table are generated from
here (`python scripts/config_reference.py --write`), and the loader checks the bounds. The
comments say why; checks across keys or needing files are in core/config_checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.semantic_config import SemanticConfig, VerifyConfig
from core.settings import REQUIRED, setting


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = setting("127.0.0.1", "address the proxy listens on")
    port: int = setting(8080, "port the proxy listens on", ge=1, le=65535)
    # Bodies are refused before they are parsed, so a huge body costs no parsing time.
    max_body_bytes: int = setting(
        4 * 1024 * 1024, "completion and embeddings request bodies above this get 413", ge=1024
    )
    # Enforced while the body streams through (it is never held whole): uploads of files,
    # audio and batch inputs run to hundreds of MB.
    max_passthrough_bytes: int = setting(
        1024 * 1024 * 1024,
        "bodies of pass-through requests (/v1/files, audio, ...) may be this large; streamed"
        " through, 413 once past it",
        ge=1,
    )
    # It protects hashing and spaCy time.
    max_messages: int = setting(2048, "chat requests with more messages get 400", ge=1)
    access_log: bool = setting(
        True,
        "one JSON line per request on stderr, written in batches (no prompts, no keys)",
    )
    shutdown_grace_s: float = setting(
        30.0, "after SIGTERM, in-flight requests and streams get this long to finish", ge=0
    )
    # Exact hits from a front process of their own (proxy/edge/front.py); everything else is
    # relayed to a worker process running the whole proxy.
    edge: bool = setting(
        False,
        "exact hits served by a front process of their own, the rest relayed to a worker"
        ' process (needs `redis.url`; see "Edge mode")',
    )
    # Off, the worker runs at normal priority and hits wait out its time slices.
    edge_worker_idle: bool = setting(
        True,
        "with `server.edge`: the worker runs at idle priority (SCHED_IDLE, else nice 19),"
        " so a hit arriving preempts it at once",
    )


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    """Edge mode across machines: light fronts relaying to a shared pool of workers over TCP
    (README, "Shared workers"). Empty `worker_urls`: the front starts its own worker on a unix
    socket, as before."""

    # Several addresses, or one name (a headless Service) resolving to several pods: requests
    # are spread over every address, and one that refuses is skipped for a while.
    worker_urls: tuple[str, ...] = setting(
        (),
        "with `server.edge`: tcp://host:port of shared workers (a name may resolve to several);"
        " set, the front starts no worker of its own",
    )
    worker_listen: str = setting(
        "127.0.0.1:8090", "`deja serve --role worker` listens for fronts on this host:port"
    )
    # Fronts and workers must hold the same one; compared in constant time.
    shared_secret: str = setting(
        "", "authenticates fronts to workers over TCP (16+ characters); required for TCP"
    )
    tls_cert: str = setting("", "worker: PEM certificate to serve the relay over TLS")
    tls_key: str = setting("", "worker: PEM private key of `tls_cert`")
    # Set on a front, it speaks TLS to its workers and checks their certificate against it.
    tls_ca: str = setting("", "front: PEM CA bundle the workers' certificates are checked with")
    connect_timeout_s: float = setting(
        1.0, "front: time allowed to connect to a worker before trying the next", gt=0
    )
    # Doubling up to retry_max_s while it keeps refusing; the report every 200 ms re-tries it.
    retry_min_s: float = setting(
        0.5, "front: a worker that could not be reached is skipped this long at first", gt=0
    )
    retry_max_s: float = setting(5.0, "front: longest a failing worker is skipped", gt=0)
    resolve_interval_s: float = setting(
        10.0, "front: how often worker names are resolved again (pods come and go)", gt=0
    )


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    # With no upstream key the client's own Authorization is forwarded and this list, when
    # non-empty, still restricts access; with one, anyone reaching the port would spend it.
    api_keys: tuple[str, ...] = setting(
        (), "client keys the proxy accepts (401 for others); required with upstream.api_key"
    )
    # The tenant hashes every credential header a request carries, so a client authenticating
    # through a header nobody named here would share the anonymous tenant with every other
    # such client (README, "Authentication").
    credential_headers: tuple[str, ...] = setting(
        (),
        "headers carrying a credential besides Authorization, api-key, x-api-key"
        " (each one's value is part of the tenant)",
    )


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    # The OpenAI paths (chat/completions, ...) are appended as the OpenAI SDKs do, so any
    # base works.
    url: str = setting(
        "http://127.0.0.1:8081/v1",
        "OpenAI-compatible base URL (…/v1, …/v1beta/openai, …/api/v1);"
        " the OpenAI paths are appended to it",
    )
    # proxy/protocol/credentials.py: so no client key reaches the provider.
    api_key: str = setting(
        "",
        "when set, sent upstream as Authorization: Bearer instead of every client"
        " credential header",
    )
    connect_timeout_s: float = setting(
        5.0, "time allowed to open a connection to the upstream", gt=0
    )
    first_byte_timeout_s: float = setting(
        120.0, "until the response headers; a CPU model server's prefill can take seconds", gt=0
    )
    read_timeout_s: float = setting(
        120.0, "between two streamed chunks, or for a whole non-streamed body", gt=0
    )
    total_timeout_s: float = setting(
        600.0, "time allowed for a whole upstream call, streams included", gt=0
    )
    # Only while no byte has reached any client: after that a retry could not be hidden.
    max_retries: int = setting(
        2,
        "retries of connection errors, 500/502/503/504 and 429, before any byte reached a client",
        ge=0,
    )
    retry_backoff_s: float = setting(0.2, "first backoff; doubles per retry, jittered", ge=0)
    retry_backoff_max_s: float = setting(2.0, "longest backoff between two retries", ge=0)
    # Without a Retry-After, a 429 is retried after the backoff.
    retry_after_max_s: float = setting(
        10.0,
        "longest Retry-After / retry-after-ms a 429 is retried after (longer: passed through);"
        " 0 = never retry 429s",
        ge=0,
    )
    max_connections: int = setting(256, "connection pool size", ge=0)
    max_concurrent: int = setting(
        64, "upstream calls in progress at once (admission control)", ge=1
    )
    max_queued: int = setting(
        256, "calls waiting for a slot; past this, 429 with Retry-After", ge=0
    )
    queue_timeout_s: float = setting(30.0, "a queued call waiting longer gets 429", gt=0)
    request_logprobs: bool = setting(
        True, "ask for logprobs (stripped if the client did not) to set TTLs from confidence"
    )
    top_logprobs: int = setting(
        5, "k of the top-k distribution used for the certainty figure", ge=0, le=20
    )


@dataclass(frozen=True, slots=True)
class CacheConfig:
    # Empty means a fixed development secret (a warning is logged).
    tenant_secret: str = setting(
        "",
        "HMAC key turning API keys into tenant ids; set it in production, same on every replica",
    )
    share_across_tenants: bool = setting(
        False, "true: all API keys share one tenant (and its entries)"
    )
    # Measured serialized.
    max_entry_bytes: int = setting(1024 * 1024, "larger answers are served but not stored", ge=0)
    cache_completions: bool = setting(True, "cache /v1/completions too (exact matches only)")
    # The key holds max_tokens, so the upstream would cut a repeat of the request the same way.
    # Off: only stop / tool_calls answers are stored.
    store_truncated: bool = setting(
        True,
        "store answers cut at max_tokens (finish_reason length; a repeat would be cut the same"
        " way)",
    )


@dataclass(frozen=True, slots=True)
class LruKConfig:
    enabled: bool = setting(True, "the in-process tier")
    k: int = setting(2, "evict by the age of each entry's K-th most recent access", ge=1)
    max_entries: int = setting(10_000, "entries held in process at most", ge=1)
    max_bytes: int = setting(256 * 1024 * 1024, "bytes held in process at most (256 MiB)", ge=1024)
    # So an entry that comes back is not treated as new (LRU-K's "retained information").
    history_entries: int = setting(10_000, "evicted entries whose access history is kept", ge=0)
    correlated_reference_period_s: float = setting(
        0.0, "accesses closer together than this count as one", ge=0
    )


@dataclass(frozen=True, slots=True)
class RedisConfig:
    url: str = setting(
        "",
        "redis://host:port/db (or rediss://); empty turns the Redis tier off. Redis 6.2 or"
        " later (`SET … GET`; Debian's 7.0 and `redis:7-alpine` are what is tested)",
    )
    cluster: bool = setting(False, "url names one node of a Redis Cluster")
    connect_timeout_s: float = setting(
        0.5, "time allowed to connect to Redis (a slow Redis is treated as down)", gt=0
    )
    socket_timeout_s: float = setting(0.5, "time allowed for one Redis command", gt=0)
    probe_interval_s: float = setting(1.0, "while Redis is down, how often to try it again", gt=0)
    key_prefix: str = setting("deja:v1", "prefix of every Redis key (the version is part of it)")
    compress_min_bytes: int = setting(
        1024, "values from this size are stored zlib-compressed", ge=0
    )
    stream_maxlen: int = setting(100_000, "approximate cap of the replication event stream", ge=1)


@dataclass(frozen=True, slots=True)
class TtlConfig:
    base_ttl_s: float = setting(
        300.0,
        "ttl = base × clamp(w_c·confidence + w_e·certainty + w_f·feedback, min, max) × jitter",
        gt=0,
    )
    w_confidence: float = setting(0.5, "weight of the mean chosen-token probability")
    w_certainty: float = setting(0.5, "weight of 1 − mean entropy / ln(k+1)")
    w_feedback: float = setting(0.25, "weight of the sum of the last three feedback signals")
    # factor_min ≤ factor_max and jitter_min ≤ jitter_max: core/config_checks.py.
    factor_min: float = setting(0.3, "the factor is clamped to [factor_min, factor_max]", gt=0)
    factor_max: float = setting(1.5, "(see above)", gt=0)
    jitter_min: float = setting(
        0.9, "a uniform jitter in [jitter_min, jitter_max] spreads expiries", gt=0
    )
    jitter_max: float = setting(1.1, "(see above)", gt=0)
    evict_feedback_sum: float = setting(
        -1.6, "an entry whose last three feedback signals sum to this or less is evicted"
    )


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    enabled: bool = setting(True, "false: every call goes through (AlwaysClosedBreaker)")
    window: int = setting(20, "outcomes remembered", ge=1)
    # min_requests ≤ window: core/config_checks.py.
    min_requests: int = setting(10, "outcomes needed before the breaker judges", ge=1)
    failure_share: float = setting(
        0.5, "connection errors, timeouts and 5xx; 4xx never count", gt=0, le=1
    )
    ttfb_p95_limit_s: float = setting(
        0.0,
        "trip when p95 time to first byte passes this; 0 = off (suits CPU model servers)",
        ge=0,
    )
    cooldown_s: float = setting(30.0, "open this long, then half-open", ge=0)
    half_open_probes: int = setting(3, "calls let through at once while half-open", ge=1)
    successes_to_close: int = setting(3, "successful probes that close a half-open breaker", ge=1)


@dataclass(frozen=True, slots=True)
class DegradeConfig:
    # Stale-if-error: kept to be served when the upstream fails.
    stale_grace_s: float = setting(
        3600.0,
        "expired entries are kept this long, served only as marked degraded answers",
        ge=0,
    )
    serve_stale: bool = setting(True, "serve expired entries within their grace as stale answers")
    neighbour_threshold: float = setting(
        0.78,
        "relaxed cosine for a degraded semantic neighbour (guards still on); 0 = off",
        ge=0,
        le=1,
    )
    fallback_template: str = setting(
        "", 'prompt-level fallback answer ("{model}" is substituted); empty = off'
    )
    unavailable_503: bool = setting(
        False,
        "with nothing to serve: false = the upstream's error, true = 503 with Retry-After",
    )


@dataclass(frozen=True, slots=True)
class GuardrailConfig:
    # A cheap screen against cache poisoning; the expressions must combine into one
    # alternation (normalize/keys/screen.py), which core/config_checks.py checks.
    injection_patterns: tuple[str, ...] = setting(
        (
            r"ignore (all |any )?(the )?(previous|prior|above) (instructions|prompts?)",
            r"disregard (all |any )?(the )?(previous|prior|above) (instructions|prompts?)",
            r"you are now (in )?(dan|developer mode)",
        ),
        "prompts matching any (case-insensitive regex) are never stored nor matched loosely",
    )


@dataclass(frozen=True, slots=True)
class AdminConfig:
    token: str = setting("", "bearer token for /admin/v1/*; empty = the admin API answers 404")
    series_interval_s: float = setting(
        10.0, "the dashboard's time series: seconds between two samples", gt=0
    )
    series_window_s: float = setting(
        3600.0, "the dashboard's time series: how far back the samples go", gt=0
    )
    recent_misses: int = setting(100, "misses (and why they missed) the dashboard lists", ge=1)
    store_prompts: bool = setting(
        False, "entries keep their prompt's text for the dashboard (prompts may be private)"
    )


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    metrics: bool = setting(True, "Prometheus text on GET /metrics")
    # otlp needs the otlp exporter package and `otlp_endpoint` (core/config_checks.py).
    traces: str = setting(
        "none",
        "OpenTelemetry spans: none, console (stderr) or otlp",
        choices=("none", "console", "otlp"),
    )
    otlp_endpoint: str = setting("", "e.g. http://127.0.0.1:4318/v1/traces")
    service_name: str = setting("deja", "service.name of the spans")
    # Parent-based: a request with a traceparent follows its sampled flag. Of the traces
    # without one, this share (by trace id) is exported, and every error and degraded answer.
    sample_ratio: float = setting(
        1.0,
        "share of traces without an incoming parent that are exported (errors and degraded"
        " answers always are)",
        ge=0,
        le=1,
    )


@dataclass(frozen=True, slots=True)
class ModelPrice:
    model: str = setting(REQUIRED, "the model name requests give")
    prompt_per_1k_usd: float = setting(REQUIRED, "USD per 1,000 prompt tokens", ge=0)
    completion_per_1k_usd: float = setting(REQUIRED, "USD per 1,000 completion tokens", ge=0)


@dataclass(frozen=True, slots=True)
class PricingConfig:
    # USD per 1,000 tokens by model, for the "estimated cost saved" stat.
    default_prompt_per_1k_usd: float = setting(
        0.0005, 'for "estimated cost saved"; unknown models use these', ge=0
    )
    default_completion_per_1k_usd: float = setting(0.0015, "(see above)", ge=0)
    models: tuple[ModelPrice, ...] = setting(
        (),
        "e.g. [{model: gpt-4o-mini, prompt_per_1k_usd: 0.00015, completion_per_1k_usd: 0.0006}]",
    )


@dataclass(frozen=True, slots=True)
class DejaConfig:
    server: ServerConfig = field(default_factory=ServerConfig)
    edge: EdgeConfig = field(default_factory=EdgeConfig)
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    upstream: UpstreamConfig = field(default_factory=UpstreamConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    lru_k: LruKConfig = field(default_factory=LruKConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    semantic: SemanticConfig = field(default_factory=SemanticConfig)
    ttl: TtlConfig = field(default_factory=TtlConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    degrade: DegradeConfig = field(default_factory=DegradeConfig)
    guardrails: GuardrailConfig = field(default_factory=GuardrailConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    pricing: PricingConfig = field(default_factory=PricingConfig)
