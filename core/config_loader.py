"""Build a `DejaConfig` from defaults, a YAML file, the environment and flags.

Each layer is a nested mapping `{section: {key: value}}`; later layers win. Values from the
environment are strings and are coerced to the field's declared type. Unknown sections or keys
are errors (with a suggestion), so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from core.config import DejaConfig, ModelPrice
from core.config_checks import value_problems
from core.errors import ConfigError

Layer = Mapping[str, Mapping[str, Any]]

ENV_PREFIX = "DEJA_"
# Short aliases documented in the README, for the settings people change most often.
ENV_ALIASES = {
    "DEJA_UPSTREAM_URL": ("upstream", "url"),
    "DEJA_REDIS_URL": ("redis", "url"),
    "DEJA_ADMIN_TOKEN": ("admin", "token"),
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# An HTTP field name (RFC 9110 5.1: a token), and the names `proxy.credential_headers` may not
# take: a credential header must reach the edge worker and the upstream as the client sent it,
# and these are one hop's, or the proxy's own (X-Deja-*, X-Request-Id), or rewritten on the way.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_NOT_CREDENTIAL_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "content-type",
        "cache-control",
        "accept-encoding",
        "x-request-id",
    }
)


def load_config(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Layer | None = None,
) -> DejaConfig:
    """Defaults < file < environment < overrides (the command line)."""
    layers: list[Layer] = []
    if path is not None:
        layers.append(read_yaml(Path(path)))
    if environ is not None:
        layers.append(env_layer(environ))
    if overrides is not None:
        layers.append(overrides)
    config = build_config(merge_layers(layers))
    validate(config)
    return config


def read_yaml(path: Path) -> Layer:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 (byte {exc.start})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML{_yaml_problem(exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict | None) for v in data.values()):
        raise ConfigError(f"config file {path} must map section names to mappings of keys")
    return {str(k): (v or {}) for k, v in data.items()}


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, on one line (PyYAML's own text spans several, with a source excerpt)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f" at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return ": " + " ".join(str(exc).split())


def env_layer(environ: Mapping[str, str]) -> Layer:
    """`DEJA_<SECTION>__<KEY>=value` (and the aliases) as a layer."""
    layer: dict[str, dict[str, Any]] = {}
    for name, value in environ.items():
        if name in ENV_ALIASES:
            section, key = ENV_ALIASES[name]
        elif name.startswith(ENV_PREFIX) and "__" in name:
            section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
        else:
            continue
        layer.setdefault(section, {})[key] = value
    return layer


def merge_layers(layers: list[Layer]) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, values in layer.items():
            merged.setdefault(section, {}).update(values)
    return merged


def build_config(values: Mapping[str, Mapping[str, Any]]) -> DejaConfig:
    sections = {f.name: f for f in dataclasses.fields(DejaConfig)}
    hints = typing.get_type_hints(DejaConfig)
    built: dict[str, Any] = {}
    for section, section_values in values.items():
        if section not in sections:
            raise ConfigError(f"unknown config section {section!r}{_suggest(section, sections)}")
        built[section] = _build_section(section, hints[section], section_values)
    return DejaConfig(**built)


def _build_section(section: str, cls: type, values: Mapping[str, Any]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, raw in values.items():
        if key not in fields:
            raise ConfigError(f"unknown config key {section}.{key}{_suggest(key, fields)}")
        kwargs[key] = _coerce(f"{section}.{key}", hints[key], raw)
    return cls(**kwargs)


def _coerce(name: str, kind: Any, raw: Any) -> Any:
    origin = typing.get_origin(kind)
    if kind is bool:
        return _coerce_bool(name, raw)
    if kind is int or kind is float:
        return _coerce_number(name, kind, raw)
    if kind is str:
        if isinstance(raw, dict | list):
            raise ConfigError(f"{name} must be a string, got {type(raw).__name__}")
        return "" if raw is None else str(raw)
    if origin is tuple:
        (item_kind, _ellipsis) = typing.get_args(kind)
        items = _as_list(name, raw)
        if item_kind is ModelPrice:
            return tuple(_coerce_price(f"{name}[{i}]", item) for i, item in enumerate(items))
        return tuple(_coerce(f"{name}[{i}]", item_kind, item) for i, item in enumerate(items))
    if origin is types.UnionType:  # pragma: no cover - no optional fields today
        raise ConfigError(f"{name}: optional fields are not supported")
    raise AssertionError(f"config field {name} has a type the loader does not know: {kind}")


def _coerce_bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def _coerce_number(name: str, kind: type, raw: Any) -> int | float:
    if isinstance(raw, bool):
        raise ConfigError(f"{name} must be a number, got {raw!r}")
    try:
        value = kind(str(raw).strip().replace("_", "")) if isinstance(raw, str) else kind(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}"
        ) from exc
    if kind is int and isinstance(raw, float) and not raw.is_integer():
        raise ConfigError(f"{name} must be an integer, got {raw!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be finite, got {raw!r}")
    return value


def _as_list(name: str, raw: Any) -> list[Any]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    if isinstance(raw, list | tuple):
        return list(raw)
    raise ConfigError(f"{name} must be a list, got {type(raw).__name__}")


def _coerce_price(name: str, raw: Any) -> ModelPrice:
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{name} must be a mapping with model, prompt_per_1k_usd, completion_per_1k_usd"
        )
    missing = [f.name for f in dataclasses.fields(ModelPrice) if f.name not in raw]
    if missing:  # ModelPrice has no defaults: the dataclass would raise a TypeError
        raise ConfigError(f"{name} lacks {', '.join(missing)}")
    return _build_section(name, ModelPrice, raw)


def _suggest(word: str, choices: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def validate(config: DejaConfig) -> None:
    """Range checks that the types cannot express. Raises ConfigError with the key's name."""
    problems: list[str] = []

    def check(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    s, u = config.server, config.upstream
    check(0 < s.port < 65536, f"server.port must be 1..65535, got {s.port}")
    check(s.max_body_bytes >= 1024, "server.max_body_bytes must be at least 1024")
    check(s.max_messages >= 1, "server.max_messages must be at least 1")
    check(s.max_passthrough_bytes >= 1, "server.max_passthrough_bytes must be at least 1")
    check(s.shutdown_grace_s >= 0, "server.shutdown_grace_s must be 0 or more")
    for key in ("connect_timeout_s", "first_byte_timeout_s", "read_timeout_s", "total_timeout_s"):
        check(getattr(u, key) > 0, f"upstream.{key} must be positive")
    check(u.queue_timeout_s > 0, "upstream.queue_timeout_s must be positive")
    check(u.max_retries >= 0, "upstream.max_retries must be 0 or more")
    for key in ("retry_backoff_s", "retry_backoff_max_s", "retry_after_max_s", "max_connections"):
        check(getattr(u, key) >= 0, f"upstream.{key} must be 0 or more")
    check(u.max_concurrent >= 1, "upstream.max_concurrent must be at least 1")
    check(u.max_queued >= 0, "upstream.max_queued must be 0 or more")
    check(0 <= u.top_logprobs <= 20, "upstream.top_logprobs must be 0..20")
    check(
        not u.api_key or bool(config.proxy.api_keys),
        "upstream.api_key is set, so proxy.api_keys must list the client keys allowed to use it",
    )
    for name in config.proxy.credential_headers:
        lower = name.lower()
        check(
            _HEADER_NAME.fullmatch(name) is not None,
            f"proxy.credential_headers: {name!r} is not a valid header name",
        )
        check(
            lower not in _NOT_CREDENTIAL_HEADERS and not lower.startswith("x-deja-"),
            f"proxy.credential_headers: {name!r} cannot be a credential header"
            " (HTTP or the proxy itself uses it)",
        )
    lru = config.lru_k
    check(lru.k >= 1, f"lru_k.k must be at least 1, got {lru.k}")
    check(lru.max_entries >= 1, "lru_k.max_entries must be at least 1")
    check(lru.max_bytes >= 1024, "lru_k.max_bytes must be at least 1024")
    check(lru.history_entries >= 0, "lru_k.history_entries must be 0 or more")
    check(
        lru.correlated_reference_period_s >= 0,
        "lru_k.correlated_reference_period_s must be 0 or more",
    )
    check(config.cache.max_entry_bytes >= 0, "cache.max_entry_bytes must be 0 or more")
    r = config.redis
    check(
        r.url == "" or r.url.startswith(("redis://", "rediss://", "unix://")),
        f"redis.url must be a redis:// URL or empty, got {r.url!r}",
    )
    for key in ("connect_timeout_s", "socket_timeout_s", "probe_interval_s"):
        check(getattr(r, key) > 0, f"redis.{key} must be positive")
    check(r.compress_min_bytes >= 0, "redis.compress_min_bytes must be 0 or more")
    check(r.stream_maxlen >= 1, "redis.stream_maxlen must be at least 1")
    check(
        not s.edge or bool(r.url),
        "server.edge needs redis.url: the front reads the entries the worker stores from Redis",
    )
    sem = config.semantic
    check(0.0 < sem.threshold <= 1.0, "semantic.threshold must be in (0, 1]")
    check(sem.batch_max >= 1, "semantic.batch_max must be at least 1")
    check(sem.embedding_workers >= 1, "semantic.embedding_workers must be at least 1")
    check(sem.candidates >= 1, "semantic.candidates must be at least 1")
    check(sem.max_entries >= 1, "semantic.max_entries must be at least 1")
    # FAISS aborts the whole process on an HNSW graph with fewer links than 2.
    check(sem.hnsw_m >= 2, "semantic.hnsw_m must be at least 2")
    check(sem.hnsw_ef_search >= 1, "semantic.hnsw_ef_search must be at least 1")
    check(sem.torch_threads >= 1, "semantic.torch_threads must be at least 1")
    for key in ("batch_wait_ms", "max_moved_phrases", "analysis_max_chars", "flat_max_entries"):
        check(getattr(sem, key) >= 0, f"semantic.{key} must be 0 or more")
    check(0.0 <= sem.answer_margin <= 1.0, "semantic.answer_margin must be in [0, 1]")
    t = config.ttl
    check(t.base_ttl_s > 0, "ttl.base_ttl_s must be positive")
    check(0 < t.factor_min <= t.factor_max, "ttl.factor_min must be positive and ≤ ttl.factor_max")
    check(0 < t.jitter_min <= t.jitter_max, "ttl.jitter_min must be positive and ≤ ttl.jitter_max")
    v = config.verify
    check(0.0 <= v.sample_share <= 1.0, "verify.sample_share must be in [0, 1]")
    check(0.0 < v.target_false_hit_rate < 1.0, "verify.target_false_hit_rate must be in (0, 1)")
    check(
        0 < v.threshold_min <= v.threshold_max <= 1,
        "verify.threshold_min ≤ threshold_max in (0, 1]",
    )
    for key in ("raise_margin", "lower_step", "max_inflight"):
        check(getattr(v, key) >= 0, f"verify.{key} must be 0 or more")
    check(-1.0 <= v.answer_agreement <= 1.0, "verify.answer_agreement must be in [-1, 1]")
    b = config.breaker
    check(
        b.window >= 1 and 1 <= b.min_requests <= b.window, "breaker.min_requests must be 1..window"
    )
    check(0.0 < b.failure_share <= 1.0, "breaker.failure_share must be in (0, 1]")
    check(b.cooldown_s >= 0, "breaker.cooldown_s must be 0 or more")
    check(b.ttfb_p95_limit_s >= 0, "breaker.ttfb_p95_limit_s must be 0 or more")
    check(
        b.half_open_probes >= 1 and b.successes_to_close >= 1, "breaker probes must be at least 1"
    )
    d = config.degrade
    check(d.stale_grace_s >= 0, "degrade.stale_grace_s must be 0 or more")
    check(0.0 <= d.neighbour_threshold <= 1.0, "degrade.neighbour_threshold must be in [0, 1]")
    check(
        config.telemetry.traces in ("none", "console", "otlp"),
        f"telemetry.traces must be none, console or otlp, got {config.telemetry.traces!r}",
    )
    problems.extend(value_problems(config))
    if problems:
        # One line (`deja serve` prints it as it is), however many problems.
        raise ConfigError("invalid configuration: " + "; ".join(problems))
