"""Request bodies for fuzzing: hypothesis strategies, and a seeded generator for long runs.

Both mix three kinds of input: requests that are almost right (real fields, some with wrong
types or values, unknown fields added), arbitrary JSON documents, and bytes that are not JSON
at all (truncated documents, invalid UTF-8, noise).
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import strategies as st

ROUTES = ("/v1/chat/completions", "/v1/completions")
ROLES = ["system", "developer", "user", "assistant", "tool", "function"]

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
content_parts = st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=40)}), max_size=3
)
messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from([*ROLES, "wizard"]) | json_values,
            "content": st.text(max_size=80) | st.none() | content_parts | json_values,
        }
    ),
    max_size=5,
)
optional_fields = {
    "stream": st.booleans() | json_values,
    "stream_options": st.just({"include_usage": True}) | json_values,
    "n": st.integers(min_value=-2, max_value=200) | json_values,
    "temperature": st.floats(min_value=0, max_value=2) | json_values,
    "logprobs": st.booleans() | st.integers(min_value=0, max_value=5) | json_values,
    "top_logprobs": st.integers(min_value=0, max_value=20) | json_values,
    "max_tokens": st.integers(min_value=1, max_value=100) | json_values,
    "user": st.text(max_size=10) | json_values,
    "x_unknown_field": json_values,
}
chat_bodies = st.fixed_dictionaries(
    {"model": st.just("m") | json_values, "messages": messages | json_values},
    optional=optional_fields,
)
completion_bodies = st.fixed_dictionaries(
    {
        "model": st.just("m") | json_values,
        "prompt": st.text(max_size=80)
        | st.lists(st.text(max_size=20), max_size=3)
        | st.lists(st.integers(min_value=0, max_value=50_000), max_size=5)
        | json_values,
    },
    optional=optional_fields,
)


@st.composite
def truncated(draw: st.DrawFn, documents: st.SearchStrategy[Any]) -> bytes:
    raw = json.dumps(draw(documents)).encode()
    return raw[: draw(st.integers(min_value=0, max_value=max(0, len(raw) - 1)))]


request_bodies = st.one_of(
    chat_bodies.map(lambda b: json.dumps(b).encode()),
    completion_bodies.map(lambda b: json.dumps(b).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    truncated(chat_bodies),
    st.binary(max_size=120),
)


# --- a seeded generator, for runs of thousands -------------------------------------------------

QUESTIONS = [f"What is fact number {i}?" for i in range(200)]


def random_request(rng: random.Random) -> tuple[str, bytes]:
    """(path, body). Valid requests ask one of 200 questions, so a long run reaches a steady
    state: the cache stops growing once it holds them all."""
    kind = rng.random()
    body: Any
    if kind < 0.35:
        body = {"model": "m", "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}]}
        if rng.random() < 0.5:
            body["stream"] = True
        if rng.random() < 0.3:
            body[rng.choice(["x_unknown", "metadata", "temperature"])] = rng.choice([0, "x", [1]])
        return ROUTES[0], json.dumps(body).encode()
    if kind < 0.55:
        return ROUTES[0], json.dumps(_wrong_types(rng)).encode()
    if kind < 0.7:
        raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi there"}]})
        return rng.choice(ROUTES), raw.encode()[: rng.randrange(len(raw))]
    if kind < 0.8:
        return rng.choice(ROUTES), rng.randbytes(rng.randrange(1, 200))
    if kind < 0.9:
        text = rng.choice(QUESTIONS).encode()
        at = rng.randrange(len(text))
        bad = text[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00"]) + text[at:]
        return ROUTES[
            0
        ], b'{"model": "m", "messages": [{"role": "user", "content": "' + bad + b'"}]}'
    depth = rng.randrange(1, 3000)
    return ROUTES[0], b'{"model": "m", "messages": ' + b"[" * depth + b"]" * depth + b"}"


def _wrong_types(rng: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    field, value = rng.choice(
        [
            ("model", 5),
            ("model", ""),
            ("messages", "hi"),
            ("messages", []),
            ("messages", [1, 2]),
            ("messages", [{"role": "wizard", "content": "hi"}]),
            ("messages", [{"role": "user", "content": {"text": "hi"}}]),
            ("messages", [{"role": "user", "content": ["hi"]}]),
            ("stream", "yes"),
            ("stream_options", [True]),
            ("n", "2"),
            ("n", 0),
            ("n", True),
            ("logprobs", "yes"),
            ("top_logprobs", 1.5),
        ]
    )
    body[field] = value
    return body
