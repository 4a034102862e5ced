"""The official `openai` client against the model server: tiny model, then real SmolLM2."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp.test_utils import TestServer
from openai import AsyncOpenAI, NotFoundError
from openai.types.chat import ChatCompletionTokenLogprob

from modelserver.config import ModelServerConfig
from modelserver.runtime import Runtime, build_runtime
from modelserver.server import create_app
from modelserver.weights import LoadedModel
from tests.modelserver.conftest import tiny_config
from tests.support.float_tolerance import (
    GreedyRun,
    assert_greedy_agrees,
    logit_tolerance,
    max_logit_bound,
)

TokenKey = tuple[str, tuple[int, ...]]


def greedy_run(entries: list[ChatCompletionTokenLogprob]) -> GreedyRun[TokenKey]:
    def key(token: str, raw: list[int] | None) -> TokenKey:
        return token, tuple(raw or ())

    return GreedyRun(
        [key(e.token, e.bytes) for e in entries],
        [[(key(t.token, t.bytes), t.logprob) for t in e.top_logprobs] for e in entries],
    )


async def open_client(
    config: ModelServerConfig, runtime: Runtime
) -> tuple[TestServer, AsyncOpenAI]:
    server = TestServer(create_app(config, runtime), handler_cancellation=True)
    await server.start_server()
    client = AsyncOpenAI(base_url=str(server.make_url("/v1")), api_key="unused", max_retries=0)
    return server, client


@pytest.fixture
async def tiny_openai(
    make_tiny_runtime: Callable[..., Runtime],
) -> AsyncIterator[AsyncOpenAI]:
    server, client = await open_client(tiny_config(), make_tiny_runtime())
    yield client
    await client.close()
    await server.close()


async def test_the_openai_client_parses_every_response_kind(tiny_openai: AsyncOpenAI) -> None:
    messages = [{"role": "user", "content": "hello"}]
    chat = await tiny_openai.chat.completions.create(
        model="random-tiny",
        messages=messages,
        max_tokens=5,
        temperature=0,  # type: ignore[arg-type]
        logprobs=True,
        top_logprobs=2,
    )
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert chat.usage is not None and chat.usage.prompt_tokens_details is not None
    assert chat.usage.prompt_tokens_details.cached_tokens == 0
    assert chat.choices[0].logprobs is not None and chat.choices[0].logprobs.content is not None

    stream = await tiny_openai.chat.completions.create(
        model="random-tiny",
        messages=messages,
        max_tokens=5,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
        # Off the first request's cached blocks: the same sums in the same order, so the same
        # text on any CPU (a prefix hit would sum in other shapes).
        extra_body={"cache_salt": "streamed"},
    )
    chunks = [chunk async for chunk in stream]
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        == chat.choices[0].message.content
    )
    assert (
        chunks[-1].usage is not None
        and chunks[-1].usage.completion_tokens == chat.usage.completion_tokens
    )

    completion = await tiny_openai.completions.create(
        model="random-tiny", prompt="abc", max_tokens=4, temperature=0, logprobs=1
    )
    assert completion.choices[0].logprobs is not None
    models = await tiny_openai.models.list()
    assert [m.id for m in models.data] == ["random-tiny"]
    with pytest.raises(NotFoundError):
        await tiny_openai.chat.completions.create(model="gpt-4", messages=messages)  # type: ignore[arg-type]


@pytest.mark.modelserver
async def test_smollm2_answers_through_the_openai_client(smollm2: LoadedModel) -> None:
    config = ModelServerConfig(kv_cache_mib=64, warmup=False)
    server, client = await open_client(config, build_runtime(config, loaded=smollm2))
    question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    # No repetition penalty: greedy then takes the best token of what the logprobs describe.
    unpenalised = {"repetition_penalty": 1.0}
    try:
        answer = await client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=question,
            max_tokens=8,
            temperature=0,  # type: ignore[arg-type]
            logprobs=True,
            top_logprobs=3,
            extra_body=unpenalised,
        )
        stream = await client.chat.completions.create(
            model="smollm2",
            messages=question,
            max_tokens=8,
            temperature=0,
            stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
            logprobs=True,
            top_logprobs=3,
            extra_body=unpenalised,
        )
        chunks = [chunk async for chunk in stream]
    finally:
        await client.close()
        await server.close()

    content = answer.choices[0].message.content
    assert content is not None and "Paris" in content
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].logprobs is not None and answer.choices[0].logprobs.content
    entries = answer.choices[0].logprobs.content
    assert "".join(t.token for t in entries) == content
    # The stream reuses the prompt's cached blocks and sums the rest in other shapes: the same
    # tokens up to a near-tie (tests/support/float_tolerance.py), then the same text.
    streamed = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content or []
    ]
    tolerance = logit_tolerance(smollm2.weights.arch, max_logit_bound(smollm2.weights))
    stop = {("<|im_end|>", tuple(b"<|im_end|>"))}
    agreement = assert_greedy_agrees(
        greedy_run(streamed), greedy_run(entries), tolerance, stop_tokens=stop
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("".join(t.token for t in entries[: agreement.num_equal]))
    if agreement.identical:  # else the texts part at the near-tie
        assert text == content
    # The streamed request reused the first one's prompt blocks.
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == (usage.prompt_tokens - 1) // 16 * 16 > 0
