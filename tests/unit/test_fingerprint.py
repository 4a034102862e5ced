"""Keys: what must change the partition, what must not, and when only exact matches count."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from normalize.keys.fingerprint import EXCLUDED_FIELDS, TenantHasher, fingerprint
from normalize.keys.request import Route
from normalize.keys.text import canonical_text

BASE: dict[str, Any] = {
    "model": "gpt-x",
    "temperature": 0.2,
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
}


def fp(
    body: dict[str, Any], tenant: str = "t1", namespace: str = "", route: Route = Route.CHAT
) -> Any:
    return fingerprint(route, body, tenant, namespace)


def changed(**fields: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body.update(fields)
    return body


@pytest.mark.parametrize(
    "variant",
    [
        changed(model="gpt-y"),
        changed(temperature=0.3),
        changed(max_tokens=10),
        changed(top_p=0.5),
        changed(seed=1),
        changed(response_format={"type": "json_object"}),
        changed(tools=[{"type": "function", "function": {"name": "f"}}]),
        changed(tool_choice="none"),
        changed(some_future_field=True),  # unknown fields are keyed too
        changed(logprobs=True),
    ],
)
def test_each_keyed_field_changes_the_partition(variant: dict[str, Any]) -> None:
    assert fp(variant).partition != fp(BASE).partition
    assert fp(variant).exact_key != fp(BASE).exact_key


@pytest.mark.parametrize("field", sorted(EXCLUDED_FIELDS))
def test_excluded_fields_do_not_change_the_keys(field: str) -> None:
    value: Any = {"include_usage": True} if field == "stream_options" else "x"
    if field == "stream":
        value = True
    if field == "metadata":
        value = {"k": "v"}
    assert fp(changed(**{field: value})).exact_key == fp(BASE).exact_key


def test_history_system_prompt_tenant_and_namespace_change_the_partition() -> None:
    base = fp(BASE)
    other_system = copy.deepcopy(BASE)
    other_system["messages"][0]["content"] = "You are verbose."
    other_history = copy.deepcopy(BASE)
    other_history["messages"][2]["content"] = "Hi there."
    shorter = changed(messages=BASE["messages"][-1:])
    for body in (other_system, other_history, shorter):
        assert fp(body).partition != base.partition
    assert fp(BASE, tenant="t2").partition != base.partition
    assert fp(BASE, namespace="docs").partition != base.partition


def test_the_last_user_turn_is_matched_on_canonical_text() -> None:
    body = copy.deepcopy(BASE)
    body["messages"][-1]["content"] = "  what is THE capital   of France?\n"
    same = fp(body)
    assert same.partition == fp(BASE).partition
    assert same.exact_key == fp(BASE).exact_key
    assert same.prompt_text == "  what is THE capital   of France?\n"  # raw, for spaCy and MiniLM
    body["messages"][-1]["content"] = "What is the capital of France!"
    assert fp(body).exact_key != fp(BASE).exact_key  # punctuation is kept


def test_integral_floats_hash_like_integers() -> None:
    assert fp(changed(temperature=1)).exact_key == fp(changed(temperature=1.0)).exact_key


def test_a_tool_loop_puts_the_whole_input_in_the_key() -> None:
    body = copy.deepcopy(BASE)
    body["messages"] += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    first = fp(body)
    assert first.prompt_text is None and not first.semantic_eligible
    body["messages"][-1]["content"] = "43"
    assert fp(body).exact_key != first.exact_key


def test_non_text_content_puts_the_whole_input_in_the_key() -> None:
    image = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "http://x/1.png"}},
    ]
    body = changed(messages=[{"role": "user", "content": image}])
    first = fp(body)
    assert first.prompt_text is None
    image[1]["image_url"]["url"] = "http://x/2.png"
    assert fp(body).exact_key != first.exact_key


def test_text_parts_are_plain_text_but_keyed_apart_from_a_string() -> None:
    parts = changed(messages=[{"role": "user", "content": [{"type": "text", "text": "Hello"}]}])
    plain = changed(messages=[{"role": "user", "content": "Hello"}])
    assert fp(parts).prompt_text == "Hello"
    assert fp(parts).partition != fp(plain).partition


def test_completions_are_exact_only_and_whitespace_sensitive() -> None:
    a = fingerprint(Route.COMPLETIONS, {"model": "m", "prompt": "def f(x):\n    return x"}, "t", "")
    b = fingerprint(Route.COMPLETIONS, {"model": "m", "prompt": "def f(x):\n  return x"}, "t", "")
    assert a.prompt_text is None
    assert a.exact_key != b.exact_key
    assert a.partition != fp(BASE).partition


def test_keys_start_with_the_partition_tag() -> None:
    request = fp(BASE)
    assert request.exact_key.startswith(request.tag) and len(request.tag) == 16


def test_stream_flags_are_read_but_not_keyed() -> None:
    request = fp(changed(stream=True, stream_options={"include_usage": True}))
    assert request.stream and request.include_usage
    assert not fp(changed(stream_options={"include_usage": True})).include_usage


def test_tenants_are_keyed_hashes() -> None:
    hasher = TenantHasher("secret")
    assert hasher.tenant_of("sk-a") != hasher.tenant_of("sk-b")
    assert hasher.tenant_of("sk-a") == TenantHasher("secret").tenant_of("sk-a")
    assert hasher.tenant_of("sk-a") != TenantHasher("other").tenant_of("sk-a")
    assert "sk-a" not in hasher.tenant_of("sk-a")
    assert hasher.tenant_of(None) == "anonymous"
    assert TenantHasher("s", share_across_tenants=True).tenant_of("sk-a") == "shared"


@pytest.mark.parametrize(
    "text,canonical",
    [
        ("  Hello\t\nWORLD  ", "hello world"),
        ("ｆｕｌｌ　ｗｉｄｔｈ", "full width"),
        ("Straße", "strasse"),
        ("Keep: punctuation!", "keep: punctuation!"),
        (
            "Fix this:\n```py\ndef F():\n    Return 1\n```\nPLEASE",
            "fix this: ```py\ndef F():\n    Return 1\n``` please",
        ),
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    assert canonical_text(text) == canonical
