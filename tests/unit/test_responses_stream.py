"""Responses API streams: a cached response replayed as typed events, events folded back."""

from __future__ import annotations

import typing
from typing import Any

import orjson
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel

from proxy.protocol.response_object import served_response
from proxy.protocol.responses_stream import (
    ResponseAssembler,
    encode_typed_event,
    replay_events,
    replay_payload,
)
from proxy.protocol.sse import SseParser

TEXT = "Paris est la capitale de la France, 巴黎是法国的首都 👍🏽 " * 3
RESPONSE: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1700000000,
    "status": "completed",
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "model": "m",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": TEXT, "annotations": []},
                {"type": "refusal", "refusal": "No more."},
            ],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "f",
            "arguments": '{"a": 1}',
            "status": "completed",
        },
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {
        "input_tokens": 3,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12,
    },
}
# The SDK's model of each event type (its union is discriminated by "type").
EVENT_MODELS: dict[str, type[BaseModel]] = {
    typing.get_args(model.model_fields["type"].annotation)[0]: model
    for model in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}


def test_a_replay_is_a_well_formed_stream_the_sdk_accepts() -> None:
    events = list(replay_events(RESPONSE))
    for event in events:
        EVENT_MODELS[event["type"]].model_validate(event)  # the SDK's own model of it
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed"
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    assert {e["response"]["id"] for e in events if "response" in e} == {"resp_1"}
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == TEXT
    arguments = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [a["arguments"] for a in arguments] == ['{"a": 1}']
    # Each item's added and done events come in order, with the same id.
    added = [
        (e["output_index"], e["item"]["id"])
        for e in events
        if e["type"].endswith("added") and "item" in e
    ]
    done = [(e["output_index"], e["item"]["id"]) for e in events if e["type"].endswith("item.done")]
    assert added == done == [(0, "rs_1"), (1, "msg_1"), (2, "fc_1")]


@pytest.mark.parametrize("cut", [1, 2, 3, 7])
def test_a_replay_read_back_in_pieces_folds_into_the_same_response(cut: int) -> None:
    payload = replay_payload(RESPONSE)
    assert payload.startswith(b"event: response.created\ndata: ")
    parser, assembler = SseParser(), ResponseAssembler()
    for at in range(0, len(payload), cut):
        for data in parser.feed(payload[at : at + cut]):
            assembler.feed(orjson.loads(data))
    for data in parser.flush():
        assembler.feed(orjson.loads(data))
    assert assembler.ended and assembler.error is None
    assert assembler.completion() == RESPONSE


def test_a_terminal_event_without_output_gets_the_done_items() -> None:
    assembler = ResponseAssembler()
    for event in replay_events(RESPONSE):
        if event["type"] == "response.completed":
            event = {**event, "response": {**RESPONSE, "output": None}}
        assembler.feed(event)
    assert assembler.completion() == RESPONSE


def test_a_stream_without_its_terminal_event_has_no_response() -> None:
    assembler = ResponseAssembler()
    for event in list(replay_events(RESPONSE))[:-1]:
        assembler.feed(event)
    assembler.saw_done = True  # a [DONE] line proves nothing in this API
    assert not assembler.ended and assembler.completion() is None


def test_an_error_event_is_kept() -> None:
    assembler = ResponseAssembler()
    assembler.feed({"type": "error", "code": "server_error", "message": "boom"})
    assert assembler.error == {"type": "error", "code": "server_error", "message": "boom"}


def test_an_event_goes_out_with_its_type() -> None:
    event = {"type": "response.output_text.delta", "delta": "é"}
    data = orjson.dumps(event).decode()
    assert encode_typed_event(data, event) == (
        f"event: response.output_text.delta\ndata: {data}\n\n".encode()
    )
    assert encode_typed_event("x", None) == b"data: x\n\n"
    assert encode_typed_event("x", {"type": "a\nb"}) == b"data: x\n\n"


def test_a_served_response_keeps_its_id_only_where_the_upstream_keeps_it() -> None:
    kept = served_response(RESPONSE, "resp_fresh", 5, upstream_keeps=True)
    assert (kept["id"], kept["created_at"]) == ("resp_1", 1700000000)
    for stored, keeps in ((RESPONSE, False), ({**RESPONSE, "store": False}, True)):
        fresh = served_response(stored, "resp_fresh", 5, upstream_keeps=keeps)
        assert (fresh["id"], fresh["created_at"]) == ("resp_fresh", 5)
        assert fresh["output"] == RESPONSE["output"]


def test_a_terminal_event_names_the_status_its_response_leaves_out() -> None:
    bare = {k: v for k, v in RESPONSE.items() if k not in ("status", "object")}
    assembler = ResponseAssembler()
    assembler.feed({"type": "response.incomplete", "sequence_number": 0, "response": bare})
    assert assembler.completion() == {**bare, "status": "incomplete"}
