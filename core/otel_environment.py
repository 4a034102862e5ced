"""OpenTelemetry's standard environment variables, read as a config layer.

An operator who configures every service's tracing with `OTEL_*` variables (the OpenTelemetry
SDK specification's, https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/)
expects Deja to follow them too. They become `telemetry.*` settings, between the config file
and the `DEJA_TELEMETRY__*` variables (core/config_loader.py), so a Deja-specific setting
still wins:

    OTEL_SDK_DISABLED=true                    telemetry.traces: none
    OTEL_TRACES_EXPORTER=otlp|console|none    telemetry.traces
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=URL    telemetry.otlp_endpoint, as it is
    OTEL_EXPORTER_OTLP_ENDPOINT=URL           telemetry.otlp_endpoint, URL + /v1/traces
    OTEL_SERVICE_NAME=name                    telemetry.service_name
    OTEL_TRACES_SAMPLER=…                     telemetry.sample_ratio: always_on 1, always_off 0,
    OTEL_TRACES_SAMPLER_ARG=ratio               traceidratio ARG (parentbased_* alike: Deja's
                                                sampling is always parent-based)

Setting an endpoint does not turn tracing on (Deja's default is off): OTEL_TRACES_EXPORTER or
telemetry.traces does. Whatever the sampler, errors and degraded answers are exported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import ConfigError

_EXPORTERS = {"otlp": "otlp", "console": "console", "none": "none"}
_FIXED_RATIOS = {"always_on": 1.0, "parentbased_always_on": 1.0}
_FIXED_RATIOS |= {"always_off": 0.0, "parentbased_always_off": 0.0}
_RATIO_SAMPLERS = {"traceidratio", "parentbased_traceidratio"}


def otel_layer(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The `telemetry` settings the OTEL_* variables in `environ` give (empty ones ignored)."""
    env = {k: v.strip() for k, v in environ.items() if k.startswith("OTEL_") and v.strip()}
    telemetry: dict[str, Any] = {}
    exporter = env.get("OTEL_TRACES_EXPORTER")
    if exporter is not None:
        if exporter.lower() not in _EXPORTERS:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER={exporter!r} is not supported: use otlp, console or none"
            )
        telemetry["traces"] = _EXPORTERS[exporter.lower()]
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        telemetry["traces"] = "none"
    if "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in env:
        telemetry["otlp_endpoint"] = env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    elif "OTEL_EXPORTER_OTLP_ENDPOINT" in env:
        telemetry["otlp_endpoint"] = env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    if "OTEL_SERVICE_NAME" in env:
        telemetry["service_name"] = env["OTEL_SERVICE_NAME"]
    ratio = _sample_ratio(env.get("OTEL_TRACES_SAMPLER"), env.get("OTEL_TRACES_SAMPLER_ARG"))
    if ratio is not None:
        telemetry["sample_ratio"] = ratio
    return {"telemetry": telemetry} if telemetry else {}


def _sample_ratio(sampler: str | None, arg: str | None) -> float | None:
    if sampler is not None and sampler.lower() in _FIXED_RATIOS:
        return _FIXED_RATIOS[sampler.lower()]
    if sampler is not None and sampler.lower() not in _RATIO_SAMPLERS:
        raise ConfigError(
            f"OTEL_TRACES_SAMPLER={sampler!r} is not supported: use always_on, always_off,"
            " traceidratio or their parentbased_ forms"
        )
    if arg is None:
        return 1.0 if sampler is not None else None  # the specification's default ratio
    try:
        ratio = float(arg)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG must be a number in 0..1, got {arg!r}")
    return ratio
