"""/v1/responses keys: the last user message is the only loose part; `store` is keyed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from normalize.keys.fingerprint import fingerprint
from normalize.keys.request import CacheRequest, Route

QUESTION = "What is the capital of France?"
BASE: dict[str, Any] = {
    "model": "gpt-x",
    "instructions": "Be terse.",
    "input": [
        {"role": "developer", "content": "Answer in English."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
        {"role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
    ],
}


def fp(body: dict[str, Any], tenant: str = "t1") -> CacheRequest:
    return fingerprint(Route.RESPONSES, body, tenant, "")


def changed(**fields: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body.update(fields)
    return body


@pytest.mark.parametrize(
    "variant",
    [
        changed(model="gpt-y"),
        changed(instructions="Be verbose."),
        changed(temperature=0.3),
        changed(top_p=0.5),
        changed(max_output_tokens=10),
        changed(truncation="auto"),
        changed(include=["reasoning.encrypted_content"]),
        changed(reasoning={"effort": "high"}),
        changed(text={"format": {"type": "json_object"}}),
        changed(tools=[{"type": "web_search"}]),
        changed(tool_choice="required"),
        changed(previous_response_id="resp_1"),
        changed(conversation="conv_1"),
        changed(store=False),
        changed(some_future_field=True),
        changed(
            input=[*BASE["input"][:1], {"role": "user", "content": "Hello"}, *BASE["input"][2:]]
        ),
    ],
)
def test_each_keyed_field_and_earlier_item_changes_the_partition(variant: dict[str, Any]) -> None:
    assert fp(variant).partition != fp(BASE).partition
    assert fp(variant).exact_key != fp(BASE).exact_key


def test_store_absent_or_null_is_store_true() -> None:
    keys = {fp(changed(store=value)).exact_key for value in (True, None)}
    keys.add(fp(BASE).exact_key)
    assert len(keys) == 1
    assert fp(BASE).upstream_keeps and not fp(changed(store=False)).upstream_keeps


@pytest.mark.parametrize("field", ["stream", "metadata", "user", "service_tier"])
def test_fields_that_never_change_the_answer_are_not_keyed(field: str) -> None:
    value: Any = True if field == "stream" else "x"
    assert fp(changed(**{field: value})).exact_key == fp(BASE).exact_key


def test_the_last_user_message_is_matched_by_its_text() -> None:
    creq = fp(BASE)
    assert creq.prompt_text == QUESTION
    # The canonical text: case and spacing do not change the exact key.
    louder = copy.deepcopy(BASE)
    louder["input"][-1]["content"][0]["text"] = "  what is the capital of france?"
    assert fp(louder).exact_key == creq.exact_key
    other = copy.deepcopy(BASE)
    other["input"][-1]["content"][0]["text"] = "What is the capital of Spain?"
    assert fp(other).partition == creq.partition
    assert fp(other).exact_key != creq.exact_key


def test_a_string_input_is_one_user_message() -> None:
    creq = fp({"model": "m", "input": QUESTION})
    assert creq.prompt_text == QUESTION and creq.route is Route.RESPONSES
    as_message = fp({"model": "m", "input": [{"role": "user", "content": QUESTION}]})
    # The same question in another form: the same text matched, in another partition.
    assert as_message.prompt_text == QUESTION
    assert as_message.partition != creq.partition


@pytest.mark.parametrize(
    "last",
    [
        {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": QUESTION},
                {"type": "input_file", "file_id": "file_1"},
            ],
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "22C"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "assistant", "content": "Paris."},
    ],
    ids=["image", "file", "function_call_output", "reasoning", "assistant_last"],
)
def test_anything_but_a_text_user_message_last_keys_the_whole_input(last: dict[str, Any]) -> None:
    body = changed(input=[*BASE["input"], last])
    creq = fp(body)
    assert creq.prompt_text is None
    changed_text = copy.deepcopy(body)
    changed_text["input"][-2]["content"][0]["text"] = "What is the capital of Spain?"
    assert fp(changed_text).partition != creq.partition


def test_responses_never_share_keys_with_chat() -> None:
    chat = fingerprint(
        Route.CHAT, {"model": "m", "messages": [{"role": "user", "content": "Q"}]}, "t", ""
    )
    assert fp({"model": "m", "input": "Q"}).partition != chat.partition
