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
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from core.config import DejaConfig, ModelPrice
from core.config_checks import value_problems
from core.errors import ConfigError
from core.otel_environment import otel_layer
from core.settings import bound_problems

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


def load_config(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Layer | None = None,
) -> DejaConfig:
    """Defaults < file < OpenTelemetry's `OTEL_*` variables < `DEJA_*` variables < overrides
    (the command line)."""
    layers: list[Layer] = []
    if path is not None:
        layers.append(read_yaml(Path(path)))
    if environ is not None:
        layers.append(otel_layer(environ))
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
    """The bounds each key declares (core/settings.py), then the checks across keys and of
    values that would only fail where they are used (core/config_checks.py). Raises
    ConfigError naming each key."""
    problems = [*bound_problems(config), *value_problems(config)]
    if problems:
        # One line (`deja serve` prints it as it is), however many problems.
        raise ConfigError("invalid configuration: " + "; ".join(problems))
