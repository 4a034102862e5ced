"""The Responses API on the model server, through the official `openai` client (tiny model):
what `make run`'s embedded upstream answers when a client calls `client.responses`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError

from modelserver.runtime import Runtime
from tests.modelserver.conftest import tiny_config
from tests.modelserver.test_openai_client import open_client

MODEL = "random-tiny"


@pytest.fixture
async def client(make_tiny_runtime: Callable[..., Runtime]) -> AsyncIterator[AsyncOpenAI]:
    server, openai = await open_client(tiny_config(), make_tiny_runtime())
    yield openai
    await openai.close()
    await server.close()


async def test_a_response_is_kept_retrieved_and_continued(client: AsyncOpenAI) -> None:
    first = await client.responses.create(
        model=MODEL, input="Say hello.", instructions="Be brief.", max_output_tokens=8
    )
    assert first.id.startswith("resp_") and first.status in ("completed", "incomplete")
    # A random-weights model's tokens may all decode to nothing (special and partial-byte
    # tokens): the text part is there, its content is whatever the tokens spell.
    assert first.usage is not None and first.usage.output_tokens > 0
    message = first.output[0]
    assert message.type == "message" and message.content[0].type == "output_text"
    assert first.instructions == "Be brief."
    again = await client.responses.retrieve(first.id)
    assert (again.id, again.output_text) == (first.id, first.output_text)
    follow = await client.responses.create(
        model=MODEL, input="And again.", previous_response_id=first.id, max_output_tokens=4
    )
    assert follow.previous_response_id == first.id
    # The kept conversation goes before the new input: a longer prompt than the input alone.
    assert follow.usage is not None and first.usage is not None
    assert follow.usage.input_tokens > first.usage.input_tokens


async def test_max_output_tokens_makes_it_incomplete(client: AsyncOpenAI) -> None:
    response = await client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": "Count."}],
        max_output_tokens=2,
        temperature=0,
    )
    if response.status == "incomplete":  # a random model may stop sooner
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens <= 2


async def test_a_stream_is_the_typed_event_sequence(client: AsyncOpenAI) -> None:
    events = [
        event
        async for event in await client.responses.create(
            model=MODEL, input="Stream it: 北京, café, 🎉", max_output_tokens=8, stream=True
        )
    ]
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == text
    assert (await client.responses.retrieve(final.id)).output_text == text


async def test_the_stream_helper_reads_it(client: AsyncOpenAI) -> None:
    # (Its get_final_response wants response.completed; a random model cut off by
    # max_output_tokens ends with response.incomplete, as OpenAI's would.)
    async with client.responses.stream(model=MODEL, input="Hi", max_output_tokens=4) as stream:
        events = [event async for event in stream]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete")
    assert last.response.output_text == "".join(deltas)  # type: ignore[union-attr]


async def test_store_false_is_not_kept(client: AsyncOpenAI) -> None:
    response = await client.responses.create(
        model=MODEL, input="Forget me.", store=False, max_output_tokens=2
    )
    with pytest.raises(NotFoundError):
        await client.responses.retrieve(response.id)
    with pytest.raises(BadRequestError, match="not found"):
        await client.responses.create(
            model=MODEL, input="Continue.", previous_response_id=response.id
        )


async def test_what_a_local_model_cannot_do_is_a_clear_400(client: AsyncOpenAI) -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    with pytest.raises(BadRequestError, match="'tools' is not supported"):
        await client.responses.create(model=MODEL, input="x", tools=[tool])  # type: ignore[list-item]
    with pytest.raises(BadRequestError, match="only message items"):
        await client.responses.create(
            model=MODEL,
            input=[{"type": "function_call_output", "call_id": "c", "output": "1"}],
        )
