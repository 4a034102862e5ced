"""POST /v1/responses through the proxy with the official openai client's `responses` API.

The stub upstream speaks the Responses API as OpenAI documents it: response objects, typed event
streams with sequence numbers, responses kept by id unless `store: false`, and
`previous_response_id` refused (400) unless it names a kept response. So a hit that handed out an
id the upstream does not hold would break the next turn of a chain here, as it would at OpenAI.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from openai import APIError, AsyncOpenAI

from core.clock import ManualClock
from tests.conftest import ProxyFactory, RunningProxy
from tests.support.stub_upstream import Behaviour, StubUpstream

QUESTION = "What is the capital of France?"
ANSWER = f"Answer to: {QUESTION}"


def client_for(proxy: RunningProxy, key: str = "sk-test") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)


async def create(client: AsyncOpenAI, **fields: Any) -> tuple[Any, Any]:
    """(the parsed response, its headers) of a non-streamed call."""
    raw = await client.responses.with_raw_response.create(model="m", **fields)
    return raw.parse(), raw.headers


async def create_streamed(client: AsyncOpenAI, **fields: Any) -> tuple[list[Any], Any]:
    """(every event of a streamed call, its headers)."""
    raw = await client.responses.with_raw_response.create(model="m", stream=True, **fields)
    return [event async for event in raw.parse()], raw.headers


def assert_well_formed(events: list[Any]) -> Any:
    """The events make one whole Responses stream; returns its completed response."""
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers)), numbers
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    for kind in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ):
        assert kind in kinds, kinds
    ids = {e.response.id for e in events if hasattr(e, "response")}
    assert len(ids) == 1, ids
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert deltas == done.output_text
    return done


async def test_plain_miss_then_hit_keeps_the_stored_id(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        first, first_headers = await create(client, input=QUESTION)
        second, second_headers = await create(client, input=QUESTION)
        # The upstream keeps the response (store defaults to true): the hit's id is its id.
        fetched = await client.responses.retrieve(second.id)
    assert first_headers["X-Deja-Cache"] == "miss"
    assert second_headers["X-Deja-Cache"] == "hit"
    assert second_headers["X-Deja-Tier"] == "lru_k"
    assert second_headers["X-Deja-Match"] == "exact"
    assert second_headers["X-Deja-Entry"] == first_headers["X-Deja-Entry"]
    assert first.output_text == second.output_text == fetched.output_text == ANSWER
    assert second.id == first.id == fetched.id
    assert second.created_at == first.created_at
    assert second.usage is not None and second.usage.output_tokens == first.usage.output_tokens  # type: ignore[union-attr]
    assert stub.response_calls() == 1
    assert stub.paths.count(f"/v1/responses/{first.id}") == 1  # the GET went through


async def test_a_store_false_hit_gets_a_fresh_id(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        first, _ = await create(client, input=QUESTION, store=False)
        second, headers = await create(client, input=QUESTION, store=False)
        # `store` is in the key: a store:true request never gets the store:false entry.
        kept, kept_headers = await create(client, input=QUESTION, store=True)
    assert headers["X-Deja-Cache"] == "hit"
    assert second.output_text == first.output_text == ANSWER
    assert second.id != first.id and second.id.startswith("resp_")
    assert first.id not in stub.stored_responses
    assert kept_headers["X-Deja-Cache"] == "miss"
    assert kept.id in stub.stored_responses
    assert stub.response_calls() == 2


@pytest.mark.parametrize("first_stream,second_stream", [(True, True), (False, True), (True, False)])
async def test_stream_and_json_hits_either_way(
    proxy_factory: ProxyFactory, stub: StubUpstream, first_stream: bool, second_stream: bool
) -> None:
    proxy = await proxy_factory()
    results = []
    async with client_for(proxy) as client:
        for stream in (first_stream, second_stream):
            if stream:
                events, headers = await create_streamed(client, input=QUESTION)
                response = assert_well_formed(events)
            else:
                response, headers = await create(client, input=QUESTION)
            results.append((response.output_text, response.id, headers["X-Deja-Cache"]))
    assert [(text, cache) for text, _, cache in results] == [(ANSWER, "miss"), (ANSWER, "hit")]
    assert results[0][1] == results[1][1]  # stored: the same id, whichever way
    assert stub.response_calls() == 1


async def test_the_stream_helper_works_unchanged(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    finals, texts = [], []
    async with client_for(proxy) as client:
        for _ in range(2):
            async with client.responses.stream(model="m", input=QUESTION) as stream:
                texts.append("".join([e.delta async for e in stream if e.type.endswith(".delta")]))
                finals.append(await stream.get_final_response())
    assert texts == [ANSWER, ANSWER]
    assert [f.output_text for f in finals] == [ANSWER, ANSWER]
    assert finals[0].id == finals[1].id
    assert stub.response_calls() == 1


async def test_a_hit_streams_typed_events_with_their_names(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    body = {"model": "m", "input": QUESTION, "stream": True}
    streams = []
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.post(proxy.url("/v1/responses"), json=body) as reply:
                assert reply.headers["Content-Type"].startswith("text/event-stream")
                streams.append((reply.headers["X-Deja-Cache"], await reply.text()))
    for cache, text in streams:
        events = [e for e in text.split("\n\n") if e]
        assert events[0].startswith("event: response.created\ndata: "), (cache, events[0])
        assert events[-1].startswith("event: response.completed\ndata: "), (cache, events[-1])
        assert "[DONE]" not in text
    assert [cache for cache, _ in streams] == ["miss", "hit"]


async def test_chains_with_previous_response_id_never_break(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        first, _ = await create(client, input="Hi")
        hit, hit_headers = await create(client, input="Hi")
        # The next turn continues from the hit's id: the upstream must know it.
        second, second_headers = await create(
            client, input="And then?", previous_response_id=hit.id
        )
        again, again_headers = await create(client, input="And then?", previous_response_id=hit.id)
        third, _ = await create(client, input="Go on", previous_response_id=again.id)
        # The same words in another chain are another question.
        other_root, _ = await create(client, input="Hello there")
        other, other_headers = await create(
            client, input="And then?", previous_response_id=other_root.id
        )
    assert hit_headers["X-Deja-Cache"] == "hit" and hit.id == first.id
    assert second_headers["X-Deja-Cache"] == "miss"
    assert again_headers["X-Deja-Cache"] == "hit" and again.id == second.id
    assert third.output_text == "Answer to: Go on"
    assert other_headers["X-Deja-Cache"] == "miss"
    assert other.output_text == "Answer to: And then?"
    assert [c.get("previous_response_id") for c in stub.calls] == [
        None,
        first.id,
        second.id,
        None,
        other_root.id,
    ]


@pytest.mark.parametrize(
    "variant",
    [
        {"instructions": "Answer in French."},
        {"temperature": 0.2},
        {"top_p": 0.5},
        {"max_output_tokens": 64},
        {"truncation": "auto"},
        {"include": ["message.output_text.logprobs"]},
        {"reasoning": {"effort": "low"}},
        {"text": {"format": {"type": "json_object"}}},
        {"tool_choice": "none"},
        {"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]},
        {"store": False},
        {"extra_body": {"future_field": 1}},
        {"input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q"}]},
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Q"}]}]},
    ],
    ids=lambda v: next(iter(v)) if "input" not in v else str(len(v["input"])),
)
async def test_every_output_changing_field_is_in_the_key(
    proxy_factory: ProxyFactory, stub: StubUpstream, variant: dict[str, Any]
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        base: dict[str, Any] = {"input": "Q"}
        await create(client, **base)
        _, headers = await create(client, **{**base, **variant})
        _, repeat = await create(client, **{**base, **variant})
    assert headers["X-Deja-Cache"] == "miss"
    assert repeat["X-Deja-Cache"] == "hit"


async def test_metadata_and_user_do_not_change_the_key(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        await create(client, input=QUESTION, metadata={"a": "1"}, user="u1")
        _, headers = await create(client, input=QUESTION, metadata={"a": "2"}, user="u2")
    assert headers["X-Deja-Cache"] == "hit"


async def test_history_before_the_last_user_message_is_keyed_exactly(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()

    def conversation(earlier: str) -> list[Any]:
        return [
            {"role": "user", "content": earlier},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Sure."}]},
            {"role": "user", "content": QUESTION},
        ]

    async with client_for(proxy) as client:
        first, _ = await create(client, input=conversation("Talk about France."))
        _, same = await create(client, input=conversation("Talk about France."))
        _, other = await create(client, input=conversation("Talk about Spain."))
    assert first.output_text == ANSWER
    assert same["X-Deja-Cache"] == "hit"
    assert other["X-Deja-Cache"] == "miss"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", ["failed", "incomplete"])
async def test_failed_and_incomplete_responses_are_not_stored(
    proxy_factory: ProxyFactory, stub: StubUpstream, status: str, stream: bool
) -> None:
    stub.behaviour = Behaviour(response_status=status)
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        for _ in range(2):
            if stream:
                events, headers = await create_streamed(client, input=QUESTION)
                assert events[-1].type == f"response.{status}"
                assert [e.sequence_number for e in events] == list(range(len(events)))
            else:
                response, headers = await create(client, input=QUESTION)
                assert response.status == status
            assert headers["X-Deja-Cache"] == "miss"
    assert stub.response_calls() == 2


async def test_a_broken_stream_is_told_and_not_stored(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(drop_after_chunks=5)
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        for _ in range(2):
            raw = await client.responses.with_raw_response.create(
                model="m", input=QUESTION, stream=True
            )
            seen: list[Any] = []
            with pytest.raises(APIError):
                async for event in raw.parse():
                    seen.append(event)
            assert [e.type for e in seen][:2] == ["response.created", "response.in_progress"]
            assert raw.headers["X-Deja-Cache"] == "miss"
    assert stub.response_calls() == 2


async def test_an_error_event_mid_stream_stores_nothing(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    error = '{"type":"error","code":"server_error","message":"boom","sequence_number":4}'
    stub.behaviour = Behaviour(inject_event=(4, error))
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        for _ in range(2):
            events, headers = await create_streamed(client, input=QUESTION)
            assert "error" in [e.type for e in events]
            assert headers["X-Deja-Cache"] == "miss"
    assert stub.response_calls() == 2


async def test_background_responses_pass_through(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        for _ in range(2):
            queued, headers = await create(client, input=QUESTION, background=True)
            assert queued.status == "queued"
            assert headers["X-Deja-Cache"] == "bypass"
        done = await client.responses.retrieve(queued.id)
    assert done.output_text == ANSWER
    assert stub.response_calls() == 2


async def test_conversation_requests_pass_through(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    # The upstream adds every turn to the conversation: a hit would leave one out.
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        for _ in range(2):
            _, headers = await create(client, input=QUESTION, conversation="conv_1")
            assert headers["X-Deja-Cache"] == "bypass"
    assert [c.get("conversation") for c in stub.calls] == ["conv_1", "conv_1"]


async def test_store_true_is_never_shared_across_tenants(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    # A kept response's id belongs to one account: with sharing on, store:true is not cached,
    # store:false still is.
    proxy = await proxy_factory(cache={"share_across_tenants": True})
    results = []
    for key in ("sk-alice", "sk-bob"):
        async with client_for(proxy, key) as client:
            _, kept = await create(client, input=QUESTION)
            _, unkept = await create(client, input=QUESTION, store=False)
            results.append((kept["X-Deja-Cache"], unkept["X-Deja-Cache"]))
    assert results == [("bypass", "miss"), ("bypass", "hit")]


async def test_a_store_true_hit_is_only_of_the_same_tenant(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy, "sk-alice") as alice, client_for(proxy, "sk-bob") as bob:
        _, first = await create(alice, input=QUESTION)
        _, other = await create(bob, input=QUESTION)
        _, again = await create(alice, input=QUESTION)
    assert [first["X-Deja-Cache"], other["X-Deja-Cache"], again["X-Deja-Cache"]] == [
        "miss",
        "miss",
        "hit",
    ]


async def test_a_tool_call_survives_the_round_trip(
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
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        plain, _ = await create(client, input=QUESTION, tools=tools)
        events, headers = await create_streamed(client, input=QUESTION, tools=tools)
    assert headers["X-Deja-Cache"] == "hit"
    calls = [item for item in events[-1].response.output if item.type == "function_call"]
    assert [(c.name, c.arguments, c.call_id) for c in calls] == [
        ("get_weather", '{"city": "Paris"}', "call_1")
    ]
    assert plain.output[0].arguments == '{"city": "Paris"}'
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == '{"city": "Paris"}'


async def test_invalid_input_is_a_400_naming_the_field(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as session:
        for body, param in (
            ({"model": "m", "input": 3}, "input"),
            ({"model": "m", "input": [{"role": "pirate", "content": "x"}]}, "input[0].role"),
            ({"model": "m", "input": "x", "store": "yes"}, "store"),
            ({"model": "m", "input": [{"role": "user", "content": 5}]}, "input[0].content"),
            ({"model": "m", "input": [{"role": "user"}]}, "input[0].content"),
            (
                {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
                "input[0].content[0].text",
            ),
            ({"input": "x"}, "model"),
        ):
            async with session.post(proxy.url("/v1/responses"), json=body) as reply:
                assert reply.status == 400
                assert (await reply.json())["error"]["param"] == param
    assert stub.response_calls() == 0


async def test_a_streamed_and_a_plain_request_share_one_upstream_call(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(chunk_delay_s=0.02)
    proxy = await proxy_factory()
    async with client_for(proxy) as client:
        (events, streamed_headers), (plain, plain_headers) = await asyncio.gather(
            create_streamed(client, input=QUESTION), create(client, input=QUESTION)
        )
    assert assert_well_formed(events).output_text == plain.output_text == ANSWER
    assert events[-1].response.id == plain.id
    assert {streamed_headers["X-Deja-Cache"], plain_headers["X-Deja-Cache"]} == {"miss"}
    assert "1" in (streamed_headers.get("X-Deja-Coalesced"), plain_headers.get("X-Deja-Coalesced"))
    assert stub.response_calls() == 1


@pytest.mark.parametrize("store", [True, False])
async def test_a_stale_answer_keeps_the_id_rule(
    proxy_factory: ProxyFactory, stub: StubUpstream, store: bool
) -> None:
    clock = ManualClock()
    proxy = await proxy_factory(
        clock=clock,
        upstream={"max_retries": 0},
        ttl={"base_ttl_s": 60, "jitter_min": 1, "jitter_max": 1},
    )
    async with client_for(proxy) as client:
        original, _ = await create(client, input=QUESTION, store=store)
        clock.advance(61)
        stub.behaviour = Behaviour(status=500)
        stale, headers = await create(client, input=QUESTION, store=store)
        events, stream_headers = await create_streamed(client, input=QUESTION, store=store)
    assert headers["X-Deja-Cache"] == stream_headers["X-Deja-Cache"] == "degraded"
    assert headers["X-Deja-Degraded"] == "stale"
    assert stale.output_text == assert_well_formed(events).output_text == ANSWER
    assert (stale.id == original.id) is store
    assert (events[-1].response.id == original.id) is store


async def test_a_fallback_answer_is_a_completed_response(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(status=500)
    proxy = await proxy_factory(
        upstream={"max_retries": 0}, degrade={"fallback_template": "Try again later ({model})."}
    )
    async with client_for(proxy) as client:
        plain, headers = await create(client, input=QUESTION)
        events, _ = await create_streamed(client, input=QUESTION)
    assert headers["X-Deja-Degraded"] == "fallback"
    assert plain.status == "completed" and plain.output_text == "Try again later (m)."
    assert plain.id.startswith("resp_") and plain.id not in stub.stored_responses
    assert assert_well_formed(events).output_text == "Try again later (m)."
