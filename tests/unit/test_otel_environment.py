"""OpenTelemetry's OTEL_* variables as config: what each sets, and the precedence
config file < OTEL_* < DEJA_TELEMETRY__* < flags (core/otel_environment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config_loader import load_config
from core.errors import ConfigError
from core.otel_environment import otel_layer


def test_each_variable_sets_its_telemetry_key() -> None:
    layer = otel_layer(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_SERVICE_NAME": "deja-eu",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
            "PATH": "/usr/bin",
        }
    )
    assert layer == {
        "telemetry": {
            "traces": "otlp",
            "otlp_endpoint": "http://collector:4318/v1/traces",
            "service_name": "deja-eu",
            "sample_ratio": 0.25,
        }
    }


def test_the_signal_specific_endpoint_wins_and_is_taken_as_it_is() -> None:
    layer = otel_layer(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/custom",
        }
    )
    assert layer == {"telemetry": {"otlp_endpoint": "http://traces:4318/custom"}}


@pytest.mark.parametrize(
    ("sampler", "ratio"),
    [("always_on", 1.0), ("parentbased_always_off", 0.0), ("traceidratio", 1.0)],
)
def test_samplers_become_a_ratio(sampler: str, ratio: float) -> None:
    assert otel_layer({"OTEL_TRACES_SAMPLER": sampler}) == {"telemetry": {"sample_ratio": ratio}}


def test_the_sdk_disabled_turns_traces_off_and_nothing_set_is_nothing() -> None:
    environ = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}
    assert otel_layer(environ) == {"telemetry": {"traces": "none"}}
    assert otel_layer({"OTEL_SERVICE_NAME": " ", "HOME": "/root"}) == {}


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER='zipkin'"),
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER='jaeger_remote'"),
        ({"OTEL_TRACES_SAMPLER_ARG": "half"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"),
    ],
)
def test_a_value_deja_cannot_follow_is_an_error_naming_the_variable(
    environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        otel_layer(environ)


def test_file_then_otel_then_deja_variables_then_flags(tmp_path: Path) -> None:
    config_file = tmp_path / "deja.yaml"
    config_file.write_text(
        "telemetry: {service_name: from-file, sample_ratio: 0.9, otlp_endpoint: http://file}\n"
    )
    environ = {
        "OTEL_SERVICE_NAME": "from-otel",
        "OTEL_TRACES_SAMPLER_ARG": "0.5",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://otel",
        "DEJA_TELEMETRY__SAMPLE_RATIO": "0.1",
        "DEJA_TELEMETRY__OTLP_ENDPOINT": "http://deja",
    }
    flags = {"telemetry": {"otlp_endpoint": "http://flag"}}

    t = load_config(config_file).telemetry
    assert (t.service_name, t.sample_ratio, t.otlp_endpoint) == ("from-file", 0.9, "http://file")
    t = load_config(config_file, environ).telemetry
    assert (t.service_name, t.sample_ratio, t.otlp_endpoint) == ("from-otel", 0.1, "http://deja")
    t = load_config(config_file, environ, flags).telemetry
    assert t.otlp_endpoint == "http://flag"
    t = load_config(config_file, {k: v for k, v in environ.items() if k.startswith("OTEL")})
    assert (t.telemetry.sample_ratio, t.telemetry.otlp_endpoint) == (0.5, "http://otel")
