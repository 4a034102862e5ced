"""The official openai client, through the proxy, against the real model server and SmolLM2."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.support.processes import ServerProcess, proxied_model_server

pytestmark = pytest.mark.modelserver

QUESTION: list[Any] = [
    {"role": "user", "content": "What is the capital of France? Answer in one word."}
]


@pytest.fixture(scope="module")
def deja() -> Iterator[ServerProcess]:
    with proxied_model_server(["--kv-cache-mib", "64"]) as front:
        yield front


def client(front: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{front.url}/v1", api_key="sk-e2e", max_retries=0, timeout=120)


def test_a_real_answer_then_a_hit(deja: ServerProcess) -> None:
    # Plain greedy: the server's default repetition penalty would steer the answer away from
    # the question's own words ("capital", "France").
    plain = {"repetition_penalty": 1.0}
    with client(deja) as c:
        first = c.chat.completions.with_raw_response.create(
            model="smollm2", messages=QUESTION, max_tokens=16, temperature=0, extra_body=plain
        )
        second = c.chat.completions.with_raw_response.create(
            model="smollm2", messages=QUESTION, max_tokens=16, temperature=0, extra_body=plain
        )
    answer = first.parse().choices[0].message.content or ""
    assert "paris" in answer.lower()
    assert first.headers["X-Deja-Cache"] == "miss"
    # Stored whether it stopped or was cut at max_tokens (the key holds max_tokens).
    assert second.headers["X-Deja-Cache"] == "hit"
    assert second.parse().choices[0].message.content == answer


def test_a_streamed_answer(deja: ServerProcess) -> None:
    with client(deja) as c:
        stream = c.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Name a color."}],
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.strip()
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_logprobs_come_back_when_asked(deja: ServerProcess) -> None:
    with client(deja) as c:
        asked = c.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Say yes."}],
            max_tokens=4,
            temperature=0,
            logprobs=True,
            top_logprobs=3,
        )
        not_asked = c.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Say no."}],
            max_tokens=4,
            temperature=0,
        )
    content = asked.choices[0].logprobs.content if asked.choices[0].logprobs else None
    assert content and len(content[0].top_logprobs) == 3
    assert not_asked.choices[0].logprobs is None  # Deja asked for them, and stripped them
