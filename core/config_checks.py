"""Checks of configuration values that one key's bounds cannot express: across keys (an order,
a key another needs), and values that would only fail where they are used (URLs, header names,
regular expressions, model files and packages, the price table).

`validate` (core/config_loader.py) runs these after the declared bounds (core/settings.py), so
a value that would otherwise raise inside `create_app`, an analysis worker or the first upstream
call stops the start instead, before any process is spawned, with a message that names the key.
Each function returns the problems it found, one line each.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from core.config import DejaConfig, EdgeConfig, PricingConfig, RedisConfig, TelemetryConfig
from core.embedding_models import EMBEDDING_MODELS, EmbeddingModel
from core.http_headers import HOP_BY_HOP
from core.semantic_config import SEMANTIC_LANGUAGES, SemanticConfig

_OTLP_EXPORTER_PACKAGE = "opentelemetry.exporter.otlp.proto.http"
# An HTTP field name (RFC 9110 5.1: a token), and the names `proxy.credential_headers` may not
# take: a credential header must reach the edge worker and the upstream as the client sent it,
# and these are one hop's, or the proxy's own (X-Deja-*, X-Request-Id), or rewritten on the way.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_NOT_CREDENTIAL_HEADERS = HOP_BY_HOP | {
    "content-type",
    "cache-control",
    "accept-encoding",
    "x-request-id",
}


def value_problems(config: DejaConfig) -> list[str]:
    return [
        *_order_problems(config),
        *_credential_header_problems(config.proxy.credential_headers),
        *_upstream_problems(config),
        *_edge_problems(config.server.edge, config.edge),
        *_redis_problems(config.redis),
        *_semantic_problems(config.semantic),
        *_pattern_problems(config.guardrails.injection_patterns),
        *_telemetry_problems(config.telemetry),
        *_pricing_problems(config.pricing),
        *(f"proxy.api_keys[{i}] is empty" for i, k in enumerate(config.proxy.api_keys) if not k),
    ]


def _order_problems(config: DejaConfig) -> Iterator[str]:
    """Pairs of keys that bound each other, and keys another key needs."""
    t, v, b, a = config.ttl, config.verify, config.breaker, config.admin
    pairs = (
        (
            "admin.series_interval_s",
            a.series_interval_s,
            "admin.series_window_s",
            a.series_window_s,
        ),
        ("ttl.factor_min", t.factor_min, "ttl.factor_max", t.factor_max),
        ("ttl.jitter_min", t.jitter_min, "ttl.jitter_max", t.jitter_max),
        ("verify.threshold_min", v.threshold_min, "verify.threshold_max", v.threshold_max),
        ("breaker.min_requests", b.min_requests, "breaker.window", b.window),
    )
    for low_key, low, high_key, high in pairs:
        if low > high:
            yield f"{low_key} must be at most {high_key} ({high}), got {low}"
    if config.upstream.api_key and not config.proxy.api_keys:
        yield (
            "upstream.api_key is set, so proxy.api_keys must list the client keys allowed to use it"
        )
    if config.semantic.backend == "redis-search" and (not config.redis.url or config.redis.cluster):
        yield (
            "semantic.backend redis-search needs redis.url, one Redis with the search module"
            " (not redis.cluster: an open-source Cluster has no search across its shards)"
        )
    if config.server.edge and not config.redis.url:
        yield (
            "server.edge needs redis.url: the front reads the entries the worker stores from Redis"
        )


def _credential_header_problems(names: Sequence[str]) -> Iterator[str]:
    for name in names:
        lower = name.lower()
        if _HEADER_NAME.fullmatch(name) is None:
            yield f"proxy.credential_headers: {name!r} is not a valid header name"
        if lower in _NOT_CREDENTIAL_HEADERS or lower.startswith("x-deja-"):
            yield (
                f"proxy.credential_headers: {name!r} cannot be a credential header"
                " (HTTP or the proxy itself uses it)"
            )


def upstream_url_problem(url: str) -> str | None:
    """Any http(s) base URL with a path: the OpenAI paths (`chat/completions`, `models`, ...)
    are appended to it, as the OpenAI SDKs append them to their `base_url`."""
    parts = _http_url(url)
    if isinstance(parts, str):
        return f"upstream.url {parts}, got {url!r}"
    if parts.query or parts.fragment:
        return f"upstream.url must not have a query or a fragment (paths are appended), got {url!r}"
    if not parts.path.strip("/"):
        return (
            f"upstream.url {url!r} has no path; the OpenAI paths are appended to it as the"
            f" OpenAI SDKs do: did you mean {url.rstrip('/')}/v1?"
        )
    return None


def _http_url(url: str) -> SplitResult | str:
    """The parts of an http(s) URL with a host and a valid port, or what is wrong with it."""
    if any(ch.isspace() for ch in url):
        return "must not contain spaces"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "has no host"
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        return "has an invalid port"
    if port == 0:
        return "has an invalid port"
    return parts


def _upstream_problems(config: DejaConfig) -> Iterator[str]:
    u = config.upstream
    problem = upstream_url_problem(u.url)
    if problem is not None:
        yield problem
    # aiohttp refuses such a header on every upstream call, long after the start.
    if any((ch < " " and ch != "\t") or ch == "\x7f" for ch in u.api_key):
        yield "upstream.api_key contains a control character (a line break?)"


# A shared secret shorter than this is refused: it is the only thing between a network peer
# and the workers' upstream key.
MIN_SHARED_SECRET_CHARS = 16


def worker_address(url: str) -> tuple[str, int] | str:
    """(host, port) of a `tcp://host:port` worker URL, or what is wrong with it."""
    parts = urlsplit(url)
    if parts.scheme != "tcp" or parts.path or parts.query or parts.fragment:
        return f"must be tcp://host:port, got {url!r}"
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or not port:
        return f"needs a host and a port (tcp://host:port), got {url!r}"
    return parts.hostname, port


def listen_address(value: str) -> tuple[str, int] | str:
    """(host, port) of a `host:port` to listen on, or what is wrong with it."""
    found = worker_address(f"tcp://{value}")
    return f"must be host:port, got {value!r}" if isinstance(found, str) else found


def _edge_problems(edge_mode: bool, e: EdgeConfig) -> Iterator[str]:
    for i, url in enumerate(e.worker_urls):
        found = worker_address(url)
        if isinstance(found, str):
            yield f"edge.worker_urls[{i}] {found}"
    if e.worker_urls and not edge_mode:
        yield "edge.worker_urls is set but server.edge is off (a front needs server.edge: true)"
    if e.worker_urls and not e.shared_secret:
        yield "edge.worker_urls needs edge.shared_secret: workers refuse fronts without it"
    if e.shared_secret and len(e.shared_secret) < MIN_SHARED_SECRET_CHARS:
        yield f"edge.shared_secret must be at least {MIN_SHARED_SECRET_CHARS} characters"
    found = listen_address(e.worker_listen)
    if isinstance(found, str):
        yield f"edge.worker_listen {found}"
    if bool(e.tls_cert) != bool(e.tls_key):
        yield "edge.tls_cert and edge.tls_key go together: set both or neither"
    for key, path in (("tls_cert", e.tls_cert), ("tls_key", e.tls_key), ("tls_ca", e.tls_ca)):
        if path and not Path(path).is_file():
            yield f"edge.{key} is not a file: {path!r}"
    if e.retry_min_s > e.retry_max_s:
        yield f"edge.retry_min_s must be at most edge.retry_max_s ({e.retry_max_s})"


def _redis_problems(r: RedisConfig) -> Iterator[str]:
    if not r.url:
        return  # the tier is off
    if not r.url.startswith(("redis://", "rediss://", "unix://")):
        yield f"redis.url must be a redis:// URL or empty, got {r.url!r}"
        return
    parts = urlsplit(r.url)
    if parts.scheme == "unix":
        if not parts.path:
            yield f"redis.url needs a socket path (unix:///path/to/redis.sock), got {r.url!r}"
        if r.cluster:
            yield "redis.cluster needs a redis:// or rediss:// URL, not a unix socket"
        return
    try:
        parts.port  # noqa: B018 - read for its ValueError
    except ValueError:
        yield f"redis.url has an invalid port, got {r.url!r}"
    if not parts.hostname:
        yield f"redis.url has no host, got {r.url!r}"


def _semantic_problems(s: SemanticConfig) -> Iterator[str]:
    unknown = [lang for lang in s.languages if lang not in SEMANTIC_LANGUAGES]
    if unknown:
        yield (
            f"semantic.languages: no meaning pipeline for {', '.join(map(repr, unknown))}"
            f" (known: {', '.join(SEMANTIC_LANGUAGES)})"
        )
    if not s.enabled:
        return  # the models are never loaded
    yield from model_problems("semantic.model", s.model)
    if s.rescore_model:
        yield from model_problems("semantic.rescore_model", s.rescore_model)
        if s.rescore_model == s.model:
            yield "semantic.rescore_model must be another model than semantic.model"
    # What spacy.load accepts: an installed pipeline package, a folder, or "blank:<lang>".
    name = s.spacy_model
    if not (name.startswith("blank:") or Path(name).is_dir() or _installed(name)):
        yield f"semantic.spacy_model is neither an installed spaCy pipeline nor a folder: {name!r}"


def model_problems(
    key: str, name: str, catalog: Mapping[str, EmbeddingModel] = EMBEDDING_MODELS
) -> Iterator[str]:
    """A catalogued model whose packages are installed, or a sentence-transformers folder."""
    model = catalog.get(name)
    if model is None:
        if not Path(name).is_dir():
            known = ", ".join(catalog)
            yield f"{key} {name!r} is neither a known model ({known}) nor a folder"
        return
    missing = [m for m in model.modules if not _installed(m) and not _distributed(m)]
    if missing:
        how = (
            f"make {model.extra} (the '{model.extra}' extra of pyproject.toml, installed with"
            " --no-deps), or make run SEMANTIC_MODEL=" + name
            if model.extra
            else "reinstall Deja's dependencies (make venv)"
        )
        yield f"{key} is {name!r} but {', '.join(missing)} is not installed: {how}"


def _pattern_problems(patterns: Sequence[str]) -> Iterator[str]:
    broken = False
    for i, pattern in enumerate(patterns):
        try:
            re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            broken = True
            yield f"guardrails.injection_patterns[{i}] {pattern!r} is not a valid expression: {exc}"
    if broken or not patterns:
        return
    # normalize/keys/screen.py matches them as one alternation, where inline global flags and
    # repeated group names are errors although each pattern compiles alone.
    try:
        re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
    except re.error as exc:
        yield f"guardrails.injection_patterns do not combine into one alternation: {exc}"


def _telemetry_problems(t: TelemetryConfig) -> Iterator[str]:
    if t.otlp_endpoint:
        parts = _http_url(t.otlp_endpoint)
        if isinstance(parts, str):
            yield f"telemetry.otlp_endpoint {parts}, got {t.otlp_endpoint!r}"
    if t.traces != "otlp":
        return
    if not t.otlp_endpoint:
        yield (
            "telemetry.otlp_endpoint must be set when telemetry.traces is otlp"
            " (e.g. http://127.0.0.1:4318/v1/traces)"
        )
    if not _installed(_OTLP_EXPORTER_PACKAGE):
        yield "telemetry.traces is otlp but opentelemetry-exporter-otlp-proto-http is not installed"


def _pricing_problems(p: PricingConfig) -> Iterator[str]:
    # The prices' bounds are declared on ModelPrice; a name is a row's identity.
    seen: set[str] = set()
    for i, price in enumerate(p.models):
        if not price.model:
            yield f"pricing.models[{i}].model is empty"
        elif price.model in seen:
            yield f"pricing.models[{i}].model repeats {price.model!r}"
        seen.add(price.model)


def _distributed(name: str) -> bool:
    """Whether a distribution `name` is installed (for packages whose import name is not an
    identifier, such as mpnet's parts)."""
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it."""
    if not all(part.isidentifier() for part in module.split(".")):
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
