"""SSE: parsing bytes cut anywhere, folding chunks into a completion, replaying it back."""

from __future__ import annotations

import itertools
import json
import random
import time
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from normalize.keys.request import Route
from proxy.protocol.sse import CompletionAssembler, SseParser, replay_chunks

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
    # Raw cuts, as a network read returns them: "é" may be split between two feeds.
    payloads = feed_in_pieces(SseParser(), cut(STREAM, sorted(cuts)))
    assert payloads[-1] == "[DONE]"
    assert [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[:-1]] == [
        "",
        "Hel",
        "lo é",
    ]


# One answer of each kind of multi-byte text: 3-byte CJK, 2-byte Latin accents, 4-byte emoji
# (with a ZWJ sequence and a variation selector), and U+2028, which is a line break to
# str.splitlines but not to an event stream.
ANSWERS = {
    "chinese": "巴黎是法国的首都。",
    "accented": "Ça coûte très cher, señor: naïve façade, Ærø, Łódź.",
    "emoji": "Bravo 👍🏽! 👨‍👩‍👧 ❤️ 🇫🇷 done\u2028next",
}
LINE_ENDS = {"lf": "\n", "crlf": "\r\n", "cr": "\r"}


def answer_stream(answer: str, line_end: str) -> tuple[bytes, list[str]]:
    """An OpenAI-style chat stream of `answer`, two characters a chunk, raw UTF-8 (not \\u
    escapes) as most upstreams send it; and the payloads a parser must give back."""
    payloads = [
        orjson.dumps({"choices": [{"index": 0, "delta": {"content": answer[i : i + 2]}}]}).decode()
        for i in range(0, len(answer), 2)
    ] + ["[DONE]"]
    eol = line_end
    text = f": comment{eol}{eol}" + "".join(f"data: {p}{eol}{eol}" for p in payloads)
    return text.encode(), payloads


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def feed_in_pieces(parser: SseParser, pieces: list[bytes]) -> list[str]:
    payloads: list[str] = []
    for piece in pieces:
        payloads += parser.feed(piece)
    return payloads + parser.flush()


def streamed_text(payloads: list[str]) -> str:
    return "".join(json.loads(p)["choices"][0]["delta"]["content"] for p in payloads[:-1])


@pytest.mark.parametrize("line_end", LINE_ENDS.values(), ids=LINE_ENDS.keys())
@pytest.mark.parametrize("answer", ANSWERS.values(), ids=ANSWERS.keys())
def test_a_stream_cut_at_every_byte_offset_parses_exactly(answer: str, line_end: str) -> None:
    stream, expected = answer_stream(answer, line_end)
    for offset in range(len(stream) + 1):
        payloads = feed_in_pieces(SseParser(), cut(stream, [offset]))
        assert payloads == expected, f"cut at byte {offset}"
        assert streamed_text(payloads).encode() == answer.encode()


@pytest.mark.parametrize("line_end", LINE_ENDS.values(), ids=LINE_ENDS.keys())
@pytest.mark.parametrize("answer", ANSWERS.values(), ids=ANSWERS.keys())
def test_a_stream_in_random_slices_of_one_to_three_bytes_parses_exactly(
    answer: str, line_end: str
) -> None:
    stream, expected = answer_stream(answer, line_end)
    rng = random.Random(f"{answer}{line_end}")
    for _ in range(50):
        points, at = [], 0
        while at < len(stream):
            at += rng.randint(1, 3)
            points.append(min(at, len(stream)))
        assert feed_in_pieces(SseParser(), cut(stream, points[:-1])) == expected


def test_a_cr_ending_one_read_and_an_lf_starting_the_next_are_one_line_end() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\r") == []
    # Were "\r" and "\n" two line ends, "\n" would be the blank line that ends the event.
    assert parser.feed(b"\ndata: b\r") == []
    assert parser.feed(b"\n") == []
    assert parser.feed(b"\r") == ["a\nb"]
    assert parser.feed(b"\n\r\n") == []  # the \n completes the \r; then one blank line
    # An empty read in between changes nothing.
    assert parser.feed(b"data: c\r") + parser.feed(b"") + parser.feed(b"\ndata: \xc3") == []
    assert parser.feed(b"\xa9\n\n") == ["c\né"]
    assert parser.flush() == []


def test_lone_cr_crlf_and_lf_line_ends_mix_in_one_stream() -> None:
    parser = SseParser()
    stream = b"data: 1\rdata: 2\n\ndata: 3\r\n\rdata: 4\n\r\n\r\n: c\r\rdata: 5\r\r"
    assert parser.feed(stream) == ["1\n2", "3", "4", "5"]
    assert parser.flush() == []


def test_fields_follow_the_event_stream_rules() -> None:
    parser = SseParser()
    # A colon-less "data" line is a data field with an empty value; only one space after the
    # colon is dropped; other fields and comments carry nothing we use.
    stream = b"data\ndata:  two\nevent: x\nid: 1\n: c\ndata:three\n\n"
    assert parser.feed(stream) == ["\n two\nthree"]


def test_a_leading_byte_order_mark_is_skipped_even_when_cut() -> None:
    parser = SseParser()
    bom = "\ufeff".encode()
    assert parser.feed(bom[:1]) == []
    assert parser.feed(bom[1:] + b"data: x\n\n") == ["x"]
    assert parser.feed(b"data: \xef\xbb\xbfy\n\n") == ["\ufeffy"]  # only the first is a BOM


def test_flush_ends_the_last_event_and_a_cut_character() -> None:
    parser = SseParser()
    assert parser.feed(b'data: {"a":1}') == []
    assert parser.flush() == ['{"a":1}']
    # A stream broken off inside a character: the bytes held back become U+FFFD at the end.
    assert parser.feed(b"data: caf\xc3") == []
    assert parser.flush() == ["caf\ufffd"]


def test_invalid_bytes_are_replaced_not_fatal() -> None:
    assert SseParser().feed(b"data: a\xffb\n\n") == ["a\ufffdb"]


def test_one_big_read_of_many_lines_is_parsed_in_linear_time() -> None:
    # 200,000 events in one 4 MB read. Re-slicing the rest of the buffer per line is
    # quadratic (minutes here); one pass over it takes well under a second.
    event = b'data: {"choices":[{"delta":{"content":"\xe4\xbd\xa0"}}]}\n\n'
    count = 200_000
    started = time.perf_counter()
    payloads = SseParser().feed(event * count)
    elapsed_s = time.perf_counter() - started
    assert len(payloads) == count and payloads[0] == '{"choices":[{"delta":{"content":"你"}}]}'
    assert elapsed_s < 10.0, f"{elapsed_s:.1f} s"


def test_one_long_line_in_many_small_reads_is_parsed_in_linear_time() -> None:
    parser = SseParser()
    started = time.perf_counter()
    assert parser.feed(b"data: ") == []
    for _ in range(200_000):
        assert parser.feed("你".encode()) == []
    payloads = parser.feed(b"\n\n")
    elapsed_s = time.perf_counter() - started
    assert payloads == ["你" * 200_000]
    assert elapsed_s < 10.0, f"{elapsed_s:.1f} s"


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
