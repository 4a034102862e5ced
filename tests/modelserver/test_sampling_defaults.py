"""Sampling a request leaves unset: the server's defaults (the model card's), and what a request
sets (penalties included) kept as set; ranges; the flags; and the defaults reaching the engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from modelserver.cli import build_parser, config_from_args
from modelserver.completion_request import (
    parse_chat_request,
    parse_completion_request,
    sampling_params,
)
from modelserver.config import ModelServerConfig
from modelserver.errors import ConfigError, InvalidRequest
from modelserver.runtime import Runtime
from modelserver.sampler import SamplingParams
from modelserver.server import create_app
from tests.modelserver.conftest import tiny_config
from tests.modelserver.test_engine import prompt_of

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STOP_IDS = frozenset({2})
UNSET = {
    "temperature": None,
    "top_p": None,
    "presence_penalty": None,
    "frequency_penalty": None,
    "repetition_penalty": None,
}


def resolved(body: dict[str, Any], config: ModelServerConfig | None = None) -> SamplingParams:
    parse = parse_chat_request if "messages" in body else parse_completion_request
    return sampling_params(
        parse(body), config or ModelServerConfig(), max_tokens=7, stop_token_ids=STOP_IDS
    )


@pytest.mark.parametrize(
    "body", [CHAT, CHAT | UNSET, {"model": "m", "prompt": "hi"}], ids=["absent", "null", "text"]
)
def test_unset_or_null_sampling_takes_the_model_cards_defaults(body: dict[str, Any]) -> None:
    assert resolved(body) == SamplingParams(
        temperature=0.2,
        top_p=0.9,
        repetition_penalty=1.1,
        presence_penalty=0.0,
        frequency_penalty=0.0,
        max_tokens=7,
        stop_token_ids=STOP_IDS,
    )


def test_what_a_request_sets_is_kept_even_zero() -> None:
    body = CHAT | {
        "temperature": 0,
        "top_p": 1,
        "repetition_penalty": 1,
        "presence_penalty": -2,
        "frequency_penalty": 2.0,
        "seed": 4,
    }
    assert resolved(body) == SamplingParams(
        temperature=0.0,
        top_p=1.0,
        repetition_penalty=1.0,
        presence_penalty=-2.0,
        frequency_penalty=2.0,
        seed=4,
        max_tokens=7,
        stop_token_ids=STOP_IDS,
    )


def test_the_servers_configured_defaults_are_the_ones_applied() -> None:
    config = ModelServerConfig(
        default_temperature=0.7, default_top_p=0.5, default_repetition_penalty=1.0
    )
    sampling = resolved(CHAT, config)
    assert (sampling.temperature, sampling.top_p, sampling.repetition_penalty) == (0.7, 0.5, 1.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"presence_penalty": 2.5}, "'presence_penalty' must be between -2 and 2"),
        ({"presence_penalty": -2.01}, "'presence_penalty' must be between -2 and 2"),
        ({"frequency_penalty": 3}, "'frequency_penalty' must be between -2 and 2"),
        ({"frequency_penalty": "high"}, "'frequency_penalty' must be a number"),
        ({"presence_penalty": True}, "'presence_penalty' must be a number"),
        ({"repetition_penalty": 0}, "'repetition_penalty' must be greater than 0"),
        ({"repetition_penalty": 2.5}, "at most 2"),
        ({"temperature": -0.1}, "'temperature' must be between 0 and 2"),
        ({"top_p": 0}, "'top_p' must be greater than 0"),
    ],
)
def test_out_of_range_sampling_is_an_invalid_request(changes: dict[str, Any], message: str) -> None:
    for body in (CHAT | changes, {"model": "m", "prompt": "hi"} | changes):
        parse = parse_chat_request if "messages" in body else parse_completion_request
        with pytest.raises(InvalidRequest, match=message):
            parse(body)


def test_the_limits_of_each_range_are_accepted() -> None:
    body = CHAT | {"presence_penalty": -2, "frequency_penalty": 2, "repetition_penalty": 2}
    request = parse_chat_request(body)
    assert (request.presence_penalty, request.frequency_penalty) == (-2.0, 2.0)
    assert request.repetition_penalty == 2.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"default_temperature": 2.5}, "default_temperature must be in 0..2"),
        ({"default_top_p": 0.0}, "default_top_p must be in"),
        ({"default_repetition_penalty": 0.0}, "default_repetition_penalty must be in"),
    ],
)
def test_bad_default_sampling_is_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelServerConfig(**changes)


def test_the_default_sampling_flags_reach_the_config() -> None:
    args = build_parser().parse_args(
        [
            "--default-temperature",
            "0",
            "--default-top-p",
            "0.5",
            "--default-repetition-penalty",
            "1.0",
            "--default-max-tokens",
            "64",
        ]
    )
    config = config_from_args(args)
    assert (config.default_temperature, config.default_top_p) == (0.0, 0.5)
    assert (config.default_repetition_penalty, config.default_max_tokens) == (1.0, 64)


async def texts(
    runtime: Runtime, config: ModelServerConfig, bodies: list[dict[str, Any]]
) -> list[str]:
    base = {"model": "random-tiny", "prompt": prompt_of(21, 17), "max_tokens": 16}
    async with TestClient(TestServer(create_app(config, runtime))) as client:
        out = []
        for body in bodies:
            response = await client.post("/v1/completions", json=base | body)
            assert response.status == 200, await response.text()
            out.append((await response.json())["choices"][0]["text"])
        return out


async def test_the_defaults_reach_the_engine_and_greedy_stays_deterministic(
    make_tiny_runtime: Callable[..., Runtime],
) -> None:
    # Greedy by default, so the default penalty's effect shows in the tokens themselves.
    config = tiny_config(default_temperature=0.0, default_repetition_penalty=2.0)
    unset, unset_again, explicit, unpenalised, openai = await texts(
        make_tiny_runtime(),
        config,
        [
            {},
            {"temperature": None, "repetition_penalty": None},
            {"temperature": 0, "repetition_penalty": 2.0},
            {"temperature": 0, "repetition_penalty": 1.0},
            {"temperature": 0, "repetition_penalty": 1.0, "frequency_penalty": 2},
        ],
    )
    assert unset == unset_again == explicit
    assert unpenalised != unset
    assert openai != unpenalised  # OpenAI's penalties are honoured, no longer refused
