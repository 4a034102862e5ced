"""The official openai client, pointed at the proxy, in front of the stub upstream."""

from __future__ import annotations

from typing import Any

import pytest
from openai import AsyncOpenAI

from tests.conftest import ProxyFactory
from tests.support.stub_upstream import Behaviour, StubUpstream

MESSAGES: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]


def client_for(base_url: str, key: str = "sk-test") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)


async def test_plain_miss_then_hit(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        first = await client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
        second = await client.chat.completions.with_raw_response.create(
            model="m", messages=MESSAGES
        )
    assert first.headers["X-Deja-Cache"] == "miss"
    assert second.headers["X-Deja-Cache"] == "hit"
    assert second.headers["X-Deja-Tier"] == "lru_k"
    assert second.headers["X-Deja-Match"] == "exact"
    assert second.headers["X-Deja-Entry"] == first.headers["X-Deja-Entry"]
    a, b = first.parse(), second.parse()
    assert (
        a.choices[0].message.content
        == b.choices[0].message.content
        == "Answer to: What is the capital of France?"
    )
    assert a.id != b.id
    assert b.usage is not None and b.usage.completion_tokens == a.usage.completion_tokens  # type: ignore[union-attr]
    assert stub.completion_calls() == 1


@pytest.mark.parametrize("first_stream,second_stream", [(True, True), (False, True), (True, False)])
async def test_stream_and_json_hits_either_way(
    proxy_factory: ProxyFactory, stub: StubUpstream, first_stream: bool, second_stream: bool
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        texts = []
        for stream in (first_stream, second_stream):
            if stream:
                raw = await client.chat.completions.with_raw_response.create(
                    model="m", messages=MESSAGES, stream=True
                )
                parts = [c.choices[0].delta.content or "" async for c in raw.parse() if c.choices]
                texts.append(("".join(parts), raw.headers["X-Deja-Cache"]))
            else:
                raw = await client.chat.completions.with_raw_response.create(
                    model="m", messages=MESSAGES
                )
                texts.append((raw.parse().choices[0].message.content, raw.headers["X-Deja-Cache"]))
    assert texts[0] == ("Answer to: What is the capital of France?", "miss")
    assert texts[1] == ("Answer to: What is the capital of France?", "hit")
    assert stub.completion_calls() == 1


async def test_tool_calls_survive_the_round_trip(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(
        tool_calls=[
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ]
    )
    proxy = await proxy_factory()
    tools: Any = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    async with client_for(proxy.base_url) as client:
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, tools=tools, stream=True
        )
        names, args = "", ""
        async for chunk in stream:
            for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                names += call.function.name or "" if call.function else ""
                args += call.function.arguments or "" if call.function else ""
        hit = await client.chat.completions.with_raw_response.create(
            model="m", messages=MESSAGES, tools=tools
        )
    assert (names, args) == ("get_weather", '{"city": "Paris"}')
    assert hit.headers["X-Deja-Cache"] == "hit"
    message = hit.parse().choices[0]
    assert message.finish_reason == "tool_calls"
    assert message.message.tool_calls is not None
    assert message.message.tool_calls[0].function.arguments == '{"city": "Paris"}'


async def test_include_usage_survives_a_streamed_hit(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        await client.chat.completions.create(model="m", messages=MESSAGES)
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        usage = [c.usage async for c in stream if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens > 0
