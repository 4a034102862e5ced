"""Request bodies → CompletionRequest, and the 400s for what cannot be served."""

from __future__ import annotations

from typing import Any

import pytest

from modelserver.completion_request import (
    CompletionRequest,
    parse_chat_request,
    parse_completion_request,
)
from modelserver.errors import InvalidRequest, UnsupportedParameter
from modelserver.tokenizer import ChatMessage

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_a_full_chat_request_is_read() -> None:
    body = CHAT | {
        "messages": [
            {"role": "developer", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 7,
        "temperature": 0,
        "top_p": 0.5,
        "seed": 3,
        "stop": "\n",
        "logprobs": True,
        "top_logprobs": 2,
        "cache_salt": "t1",
        "user": "ignored",
        "some_future_field": {"ignored": True},
    }

    assert parse_chat_request(body) == CompletionRequest(
        chat=True,
        model="m",
        messages=(ChatMessage("system", "be brief"), ChatMessage("user", "ab")),
        stream=True,
        include_usage=True,
        max_tokens=7,
        temperature=0.0,
        top_p=0.5,
        seed=3,
        stop=("\n",),
        logprobs=True,
        top_logprobs=2,
        cache_salt="t1",
    )


def test_completion_prompts_may_be_text_or_token_ids() -> None:
    text = parse_completion_request({"model": "m", "prompt": ["once"], "logprobs": 3})
    assert (text.prompt_text, text.prompt_token_ids) == ("once", None)
    assert (text.logprobs, text.top_logprobs) == (True, 3)
    ids = parse_completion_request({"model": "m", "prompt": [1, 2, 3], "max_tokens": 4})
    assert (ids.prompt_text, ids.prompt_token_ids, ids.max_tokens) == (None, (1, 2, 3), 4)
    assert not ids.logprobs


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": None}, "must provide a model"),
        ({"messages": []}, "non-empty array"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "role must be one of"),
        ({"messages": [{"role": "user", "content": 5}]}, "content must be a string"),
        ({"temperature": 3}, "between 0 and 2"),
        ({"temperature": "hot"}, "'temperature' must be a number"),
        ({"top_p": 0}, "greater than 0"),
        ({"max_tokens": 0}, "at least 1"),
        ({"stream": "yes"}, "'stream' must be bool"),
        ({"seed": 1.5}, "'seed' must be int"),
        ({"stop": ["a", ""]}, "non-empty string"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "at most 4"),
        ({"top_logprobs": 3}, "requires 'logprobs'"),
        ({"logprobs": True, "top_logprobs": 21}, "between 0 and 20"),
        ({"cache_salt": 5}, "'cache_salt' must be a string"),
    ],
)
def test_bad_chat_fields_are_invalid_requests(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_chat_request(CHAT | changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"n": 2},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "auto"},
        {"logit_bias": {"1": 5}},
        {"response_format": {"type": "json_object"}},
        {"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
    ],
)
def test_known_parameters_we_cannot_honour_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedParameter):
        parse_chat_request(CHAT | changes)


def test_neutral_values_of_unsupported_parameters_are_accepted() -> None:
    body = CHAT | {"n": 1, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}}
    assert parse_chat_request(body | {"tool_choice": "none", "response_format": {"type": "text"}})


@pytest.mark.parametrize(
    "body",
    [
        [1, 2],
        {"model": "m", "prompt": ["a", "b"]},
        {"model": "m", "prompt": [1, -2]},
        {"model": "m", "prompt": 5},
        {"model": "m", "prompt": "x", "logprobs": 6},
    ],
)
def test_bad_completion_bodies_are_invalid_requests(body: object) -> None:
    with pytest.raises(InvalidRequest):
        parse_completion_request(body)


@pytest.mark.parametrize("changes", [{"echo": True}, {"best_of": 2}, {"suffix": "x"}])
def test_completion_only_parameters_we_cannot_honour_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedParameter):
        parse_completion_request({"model": "m", "prompt": "x"} | changes)
