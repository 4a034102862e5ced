"""Everyday questions asked twice, as a new user would: the official openai client with its
default parameters (no temperature, no max_tokens), through the proxy, against the real model
server with its defaults. The second ask must be a hit.

Before, SmolLM2 sampled at temperature 1 ran about half its answers to the 512-token default
(finish_reason `length`, 27-90 s each on a shared CPU), and those were not stored, so the repeat
missed. Now the model server samples as SmolLM2's model card does when a request does not say
(temperature 0.2, top-p 0.9, repetition penalty 1.1) with a shorter default max_tokens, and the
proxy stores answers cut at max_tokens (the key holds max_tokens, so the upstream would cut the
repeat the same way).

`make test` asks three of the questions (about a minute on two shared cores); all eight are
behind the `slow` marker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.support.processes import ServerProcess, proxied_model_server

pytestmark = pytest.mark.modelserver

# Two that SmolLM2 answered at length before (each ran to 512 tokens, not stored), one short.
# With the defaults, the beach list still runs past 256 tokens: cut, stored, and hit.
QUICK = [
    "What is the capital of France?",
    "How do I boil an egg?",
    "What should I pack for a beach holiday?",
]
EVERYDAY = [
    *QUICK,
    "Give me a recipe for pancakes",
    "What is photosynthesis?",
    "How many days are in a leap year?",
    "How do I make a cup of tea?",
    "Why is the sky blue?",
]


@pytest.fixture(scope="module")
def deja() -> Iterator[ServerProcess]:
    # The model server exactly as `make run` starts it (its default flags).
    with proxied_model_server() as front:
        yield front


def ask_twice(front: ServerProcess, questions: list[str], api_key: str) -> None:
    """Each question twice in a row; `api_key` is the user's tenant, so tests never share."""
    finishes = []
    with OpenAI(base_url=f"{front.url}/v1", api_key=api_key, timeout=300) as client:
        for question in questions:
            messages = [{"role": "user", "content": question}]
            first = client.chat.completions.with_raw_response.create(
                model="smollm2",
                messages=messages,  # type: ignore[arg-type]
            )
            second = client.chat.completions.with_raw_response.create(
                model="smollm2",
                messages=messages,  # type: ignore[arg-type]
            )
            answer = first.parse().choices[0]
            finishes.append(answer.finish_reason)
            assert answer.message.content, question
            assert first.headers["X-Deja-Cache"] == "miss", question
            assert second.headers["X-Deja-Cache"] == "hit", (question, answer.finish_reason)
            repeat = second.parse().choices[0]
            assert (repeat.message.content, repeat.finish_reason) == (
                answer.message.content,
                answer.finish_reason,
            )
    assert set(finishes) <= {"stop", "length"}


def test_everyday_questions_asked_twice_hit_the_second_time(deja: ServerProcess) -> None:
    ask_twice(deja, QUICK, api_key="sk-new-user")


@pytest.mark.slow
def test_eight_everyday_questions_asked_twice_hit_the_second_time(deja: ServerProcess) -> None:
    ask_twice(deja, EVERYDAY, api_key="sk-another-new-user")
