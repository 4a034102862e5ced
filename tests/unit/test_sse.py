"""SSE: parsing bytes cut anywhere, folding chunks into a completion, replaying it back."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from normalize.request import Route
from proxy.sse import CompletionAssembler, SseParser, replay_chunks

STREAM = (
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
    b": keep-alive comment\n\n"
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":"Hel"},"finish_reason":null}]}\r\n\r\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":"lo \xc3\xa9"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_parser_is_indifferent_to_where_bytes_are_cut(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    parser = SseParser()
    payloads: list[str] = []
    decoder_safe = bytearray()
    for start, end in itertools.pairwise(points):
        decoder_safe += STREAM[start:end]
        # Feed only whole UTF-8 sequences, as the upstream reader's decoder would.
        text = decoder_safe.decode("utf-8", "ignore")
        if text.encode() == bytes(decoder_safe):
            payloads += parser.feed(bytes(decoder_safe))
            decoder_safe.clear()
    payloads += parser.feed(bytes(decoder_safe)) + parser.flush()
    assert payloads[-1] == "[DONE]"
    assert [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[:-1]] == [
        "",
        "Hel",
        "lo é",
    ]


def test_assembler_folds_content_tool_calls_logprobs_and_usage() -> None:
    assembler = CompletionAssembler(Route.CHAT)
    chunks: list[dict[str, Any]] = [
        {
            "id": "c",
            "created": 5,
            "model": "m",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "Hi"},
                    "logprobs": {"content": [{"token": "Hi", "logprob": -0.1}]},
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "get_", "arguments": '{"a"'},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "function": {"name": "weather", "arguments": ": 1}"}}
                        ]
                    },
                }
            ],
        },
        {
            "id": "c",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
            "usage": None,
        },
        {
            "id": "c",
            "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        },
    ]
    for chunk in chunks:
        assembler.feed(chunk)
    assembler.saw_done = True
    completion = assembler.completion()
    assert assembler.is_clean()
    assert completion["object"] == "chat.completion"
    assert completion["usage"]["total_tokens"] == 5
    choice = completion["choices"][0]
    assert choice["message"]["content"] == "Hi"
    assert choice["message"]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"a": 1}'},
        }
    ]
    assert choice["logprobs"]["content"][0]["token"] == "Hi"


def test_assembler_is_not_clean_without_done_or_with_length_or_error() -> None:
    for reason, done, error in [
        ("stop", False, False),
        ("length", True, False),
        ("stop", True, True),
    ]:
        assembler = CompletionAssembler(Route.CHAT)
        assembler.feed(
            {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": reason}]}
        )
        if error:
            assembler.feed({"error": {"message": "boom"}})
        assembler.saw_done = done
        assert not assembler.is_clean()


def round_trip(completion: dict[str, Any], route: Route, include_usage: bool) -> dict[str, Any]:
    assembler = CompletionAssembler(route)
    chunks = list(replay_chunks(completion, route, include_usage))
    for chunk in chunks:
        assembler.feed(chunk)
    assembler.saw_done = True
    return assembler.completion()


def test_replay_then_assemble_gives_the_completion_back() -> None:
    completion = {
        "id": "x",
        "object": "chat.completion",
        "created": 9,
        "model": "m",
        "system_fingerprint": "fp",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "word " * 40},
                "logprobs": None,
                "finish_reason": "stop",
            },
            {
                "index": 1,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            },
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    assert round_trip(completion, Route.CHAT, include_usage=True) == completion


def test_replay_streams_one_chunk_per_logprob_token() -> None:
    tokens = [
        {"token": t, "logprob": -0.5, "bytes": None, "top_logprobs": []} for t in ("Hel", "lo", "!")
    ]
    completion = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!"},
                "logprobs": {"content": tokens},
                "finish_reason": "stop",
            }
        ],
    }
    chunks = list(replay_chunks(completion, Route.CHAT, include_usage=False))
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["", "Hel", "lo", "!", None]
    assert round_trip(completion, Route.CHAT, False)["choices"][0]["logprobs"]["content"] == tokens


def test_text_completion_replay() -> None:
    completion = {
        "id": "x",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": "lorem " * 30, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 30, "total_tokens": 31},
    }
    assert round_trip(completion, Route.COMPLETIONS, include_usage=True) == completion
