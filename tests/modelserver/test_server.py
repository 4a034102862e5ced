"""HTTP over a tiny random model: wire format, streaming, errors, metrics, disconnects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, ClientTimeout
from aiohttp.test_utils import TestClient, TestServer

from modelserver.config import ModelServerConfig
from modelserver.errors import Overloaded
from modelserver.runtime import Runtime, build_runtime
from modelserver.server import create_app, error_response
from modelserver.weights import LoadedModel, load_model
from tests.modelserver.conftest import tiny_config
from tests.support.float_tolerance import (
    GreedyRun,
    assert_greedy_agrees,
    assert_logprobs_close,
    logit_tolerance,
    max_logit_bound,
)

MODEL = "random-tiny"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Say something long."}]}
# Greedy with the default repetition penalty off: each step then chooses the best token of the
# distribution its logprobs describe, which is what the near-tie rule reads.
LOGGED_GREEDY = {"temperature": 0, "repetition_penalty": 1.0, "logprobs": True}
TokenKey = tuple[str, tuple[int, ...]]
STOP: set[TokenKey] = {("<|im_end|>", tuple(b"<|im_end|>"))}


async def serve(config: ModelServerConfig, runtime: Runtime) -> TestClient[Any, Any]:
    # handler_cancellation as `deja modelserver` runs: a client that leaves cancels its handler.
    return TestClient(TestServer(create_app(config, runtime), handler_cancellation=True))


@pytest.fixture
async def client(make_tiny_runtime: Callable[..., Runtime]) -> AsyncIterator[TestClient[Any, Any]]:
    async with await serve(tiny_config(), make_tiny_runtime()) as test_client:
        yield test_client


async def post(client: TestClient[Any, Any], path: str, body: object) -> tuple[int, Any]:
    response = await client.post(path, json=body)
    return response.status, await response.json()


async def events(client: TestClient[Any, Any], path: str, body: dict[str, Any]) -> list[Any]:
    """The SSE events of a streamed response, `[DONE]` kept as the string."""
    response = await client.post(path, json=body | {"stream": True})
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    raw = (await response.read()).decode()
    assert raw.endswith("\n\n")
    out = []
    for block in raw.strip("\n").split("\n\n"):
        assert block.startswith("data: "), block
        payload = block.removeprefix("data: ")
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def token_key(entry: dict[str, Any]) -> TokenKey:
    return entry["token"], tuple(entry["bytes"])


def candidates(entry: dict[str, Any]) -> list[tuple[TokenKey, float]]:
    return [(token_key(top), top["logprob"]) for top in entry["top_logprobs"]]


def greedy_run(entries: list[dict[str, Any]]) -> GreedyRun[TokenKey]:
    """The tokens of chat logprobs `content`, each with its alternatives."""
    return GreedyRun([token_key(e) for e in entries], [candidates(e) for e in entries])


def tiny_tolerance(model: LoadedModel) -> float:
    # Only logprobs come back over HTTP, so the logits' scale is bounded from the weights.
    return logit_tolerance(model.weights.arch, max_logit_bound(model.weights))


async def test_chat_completion_follows_the_openai_format(client: TestClient[Any, Any]) -> None:
    status, body = await post(
        client, "/v1/chat/completions", CHAT | {"max_tokens": 5, "temperature": 0}
    )

    assert status == 200
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == MODEL
    assert isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["logprobs"] is None
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    if choice["finish_reason"] == "length":
        assert usage["completion_tokens"] == 5


async def test_a_repeated_prompt_is_served_from_the_prefix_cache_unless_salted(
    client: TestClient[Any, Any], tiny_model: LoadedModel
) -> None:
    request = CHAT | LOGGED_GREEDY | {"max_tokens": 8, "top_logprobs": 5}
    _, first = await post(client, "/v1/chat/completions", request)
    _, second = await post(client, "/v1/chat/completions", request)
    _, salted = await post(client, "/v1/chat/completions", request | {"cache_salt": "tenant-b"})

    prompt_tokens = first["usage"]["prompt_tokens"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == (prompt_tokens - 1) // 4 * 4
    assert salted["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # The hit computes only the prompt's tail, in other shapes than the first request: the same
    # answer, except where a near-tie lets float32's rounding break it the other way.
    reference = greedy_run(first["choices"][0]["logprobs"]["content"])
    for other in (second, salted):
        run = greedy_run(other["choices"][0]["logprobs"]["content"])
        agreement = assert_greedy_agrees(
            run, reference, tiny_tolerance(tiny_model), stop_tokens=STOP
        )
        if agreement.identical:  # else the texts part at the near-tie
            assert other["choices"][0]["message"] == first["choices"][0]["message"]


async def test_streamed_chat_has_role_content_finish_usage_and_done(
    client: TestClient[Any, Any],
) -> None:
    request = CHAT | {"max_tokens": 10, "temperature": 0}
    _, whole = await post(client, "/v1/chat/completions", request)
    # A salt of its own keeps the stream off the first request's cached blocks: both compute
    # the same sums in the same order, so their texts are equal on any CPU.
    stream = await events(
        client,
        "/v1/chat/completions",
        request | {"stream_options": {"include_usage": True}, "cache_salt": "streamed"},
    )

    *chunks, usage_chunk, done = stream
    assert done == "[DONE]"
    assert {c["id"] for c in stream[:-1]} == {stream[0]["id"]}
    assert all(c["object"] == "chat.completion.chunk" for c in stream[:-1])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["usage"] is None for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "finish_reason": whole["choices"][0]["finish_reason"],
        "logprobs": None,
        "delta": {},
    }
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]


async def test_streams_without_include_usage_carry_no_usage(client: TestClient[Any, Any]) -> None:
    stream = await events(client, "/v1/chat/completions", CHAT | {"max_tokens": 3})

    assert stream[-1] == "[DONE]"
    assert all("usage" not in chunk for chunk in stream[:-1])


async def test_chat_logprobs_have_tokens_bytes_and_alternatives(
    client: TestClient[Any, Any], tiny_model: LoadedModel
) -> None:
    request = CHAT | LOGGED_GREEDY | {"max_tokens": 6, "top_logprobs": 3}
    _, body = await post(client, "/v1/chat/completions", request)

    content = body["choices"][0]["logprobs"]["content"]
    assert (
        len(content) == body["usage"]["completion_tokens"]
        or body["choices"][0]["finish_reason"] == "stop"
    )
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["logprob"] <= 0
        assert all(0 <= b < 256 for b in entry["bytes"])
        assert len(entry["top_logprobs"]) == 3
        assert entry["top_logprobs"][0]["logprob"] == pytest.approx(entry["logprob"])

    stream = await events(client, "/v1/chat/completions", request)
    streamed = [
        e
        for c in stream[:-1]
        if c["choices"][0]["logprobs"]
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    # The stream finds the prompt's blocks cached and computes the rest in other shapes: its
    # floats agree within float32's tolerance, not bit for bit, and so do its greedy tokens up
    # to a near-tie.
    tolerance = tiny_tolerance(tiny_model)
    agreement = assert_greedy_agrees(
        greedy_run(streamed), greedy_run(content), tolerance, stop_tokens=STOP
    )
    for ours, reference in zip(streamed, content[: agreement.num_equal], strict=False):
        assert set(ours) == set(reference)
        assert ours["logprob"] == pytest.approx(reference["logprob"], abs=2 * tolerance)
    # At a near-tie too, both saw the same text: their alternatives still compare.
    for ours, reference in zip(streamed, content[: agreement.num_equal + 1], strict=False):
        assert_logprobs_close(candidates(ours), candidates(reference), tolerance)


async def test_completions_return_text_and_legacy_logprobs(client: TestClient[Any, Any]) -> None:
    request = {
        "model": MODEL,
        "prompt": "Once upon a time",
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": 2,
    }
    status, body = await post(client, "/v1/completions", request)

    assert status == 200
    assert body["object"] == "text_completion"
    assert body["id"].startswith("cmpl-")
    choice = body["choices"][0]
    logprobs = choice["logprobs"]
    assert (
        len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["text_offset"])
    )
    assert logprobs["text_offset"] == sorted(logprobs["text_offset"])
    assert all(len(top) <= 2 for top in logprobs["top_logprobs"])
    assert body["usage"]["prompt_tokens"] == len("Once upon a time")  # one token per byte

    # Its own salt: cold like the first request, the same sums in the same order (see above).
    stream = await events(client, "/v1/completions", request | {"cache_salt": "streamed"})
    assert stream[-1] == "[DONE]"
    assert all(c["object"] == "text_completion" for c in stream[:-1])
    assert "".join(c["choices"][0]["text"] for c in stream[:-1]) == choice["text"]
    assert stream[-2]["choices"][0]["finish_reason"] == choice["finish_reason"]


async def test_a_stop_string_ends_the_text_before_it(client: TestClient[Any, Any]) -> None:
    request = {"model": MODEL, "prompt": [10, 11, 12], "max_tokens": 24, "temperature": 0}
    _, free = await post(client, "/v1/completions", request)
    text = free["choices"][0]["text"]
    stop = text[5:7]
    assert len(stop) == 2, f"the tiny model should write at least 7 characters, wrote {text!r}"

    _, stopped = await post(client, "/v1/completions", request | {"stop": [stop]})
    stream = await events(client, "/v1/completions", request | {"stop": stop})

    assert stopped["choices"][0]["text"] == text[: text.index(stop)]
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["text"] for c in stream[:-1]) == text[: text.index(stop)]


async def test_seeded_sampling_repeats_through_http(client: TestClient[Any, Any]) -> None:
    request = CHAT | {"max_tokens": 12, "temperature": 1.0, "seed": 42}
    _, first = await post(client, "/v1/chat/completions", request)
    _, second = await post(client, "/v1/chat/completions", request)

    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/v1/chat/completions", b"{not json", 400, "invalid_request"),
        ("POST", "/v1/chat/completions", {"messages": CHAT["messages"]}, 400, "invalid_request"),
        ("POST", "/v1/chat/completions", CHAT | {"model": "gpt-4"}, 404, "model_not_found"),
        (
            "POST",
            "/v1/chat/completions",
            CHAT | {"tools": [{"type": "function"}]},
            400,
            "unsupported_parameter",
        ),
        (
            "POST",
            "/v1/completions",
            {"model": MODEL, "prompt": "x" * 300},
            400,
            "context_length_exceeded",
        ),
        (
            "POST",
            "/v1/completions",
            {"model": MODEL, "prompt": "x", "max_tokens": 300},
            400,
            "context_length_exceeded",
        ),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": [1, 999]}, 400, "invalid_request"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": ""}, 400, "invalid_request"),
        ("GET", "/v1/chat/completions", None, 405, "method_not_allowed"),
        ("GET", "/v1/nothing", None, 404, "not_found"),
        ("GET", "/v1/models/gpt-4", None, 404, "model_not_found"),
    ],
)
async def test_bad_requests_get_openai_errors(
    client: TestClient[Any, Any], method: str, path: str, body: object, status: int, code: str
) -> None:
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body else None)
    response = await client.request(method, path, data=data)

    assert response.status == status
    error = (await response.json())["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code
    assert error["message"]


async def test_a_body_over_the_limit_gets_413(make_tiny_runtime: Callable[..., Runtime]) -> None:
    config = tiny_config(max_body_bytes=1000)
    async with await serve(config, make_tiny_runtime()) as test_client:
        status, body = await post(
            test_client, "/v1/chat/completions", CHAT | {"padding": "x" * 2000}
        )
    assert status == 413
    assert body["error"] == {
        "message": "the request body is too large",
        "type": "invalid_request_error",
        "code": "request_too_large",
    }


def test_overload_errors_say_when_to_retry() -> None:
    response = error_response(Overloaded("too many requests are waiting", retry_after_s=1))
    assert response.status == 429
    assert response.headers["Retry-After"] == "1"


async def test_models_health_and_readiness(client: TestClient[Any, Any]) -> None:
    models = await (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["object"] == "model"
    assert (await client.get(f"/v1/models/{MODEL}")).status == 200
    assert (await client.get("/v1/models/random:tiny")).status == 200  # the --model spelling
    assert (await client.get("/healthz")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["max_model_len"] == 256


async def test_a_stopped_engine_fails_readiness_and_requests(
    make_tiny_runtime: Callable[..., Runtime],
) -> None:
    runtime = make_tiny_runtime()
    async with await serve(tiny_config(), runtime) as test_client:
        runtime.engine.stop()
        assert (await test_client.get("/readyz")).status == 503
        status, body = await post(test_client, "/v1/chat/completions", CHAT)
    assert status == 503
    assert body["error"]["code"] == "engine_unavailable"


async def test_metrics_report_hits_blocks_queue_and_throughput(
    client: TestClient[Any, Any],
) -> None:
    for _ in range(2):
        await post(client, "/v1/chat/completions", CHAT | {"max_tokens": 4, "temperature": 0})

    response = await client.get("/metrics")
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    metrics = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in (await response.text()).splitlines()
        if line and not line.startswith("#")
    }
    queried = metrics["deja_modelserver_prefix_cache_queried_tokens_total"]
    hits = metrics["deja_modelserver_prefix_cache_hit_tokens_total"]
    assert hits > 0
    assert metrics["deja_modelserver_prefix_cache_hit_rate"] == pytest.approx(hits / queried)
    assert metrics['deja_modelserver_kv_blocks{state="used"}'] == 0
    assert metrics['deja_modelserver_kv_blocks{state="free"}'] == 64
    assert metrics['deja_modelserver_kv_blocks{state="cached"}'] > 0
    assert metrics["deja_modelserver_queue_depth"] == 0
    assert metrics["deja_modelserver_generation_tokens_total"] >= 8
    assert "deja_modelserver_generation_tokens_per_second" in metrics


# --- clients that leave: a model slow enough (SmolLM2's shape, random weights) to leave mid-way


@pytest.fixture(scope="module")
def slow_model() -> LoadedModel:
    return load_model("random:smollm2-135m", cache_dir=Path("/nonexistent"))


@pytest.fixture
async def slow_server(slow_model: LoadedModel) -> AsyncIterator[tuple[TestServer, Runtime]]:
    config = ModelServerConfig(model="random:smollm2-135m", kv_cache_blocks=32, warmup=False)
    runtime = build_runtime(config, loaded=slow_model)
    server = TestServer(create_app(config, runtime), handler_cancellation=True)
    await server.start_server()
    yield server, runtime
    await server.close()


async def wait_for_abort(runtime: Runtime) -> None:
    """Until the engine has aborted the request and holds no block (it runs on its own thread)."""
    for _ in range(200):
        stats = runtime.engine.stats()
        if stats.num_aborted == 1 and stats.num_running == 0 and stats.num_used_blocks == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the engine did not release the request: {runtime.engine.stats()}")


async def test_a_streaming_client_that_leaves_frees_its_blocks(
    slow_server: tuple[TestServer, Runtime],
) -> None:
    server, runtime = slow_server
    body = {"model": "random-smollm2-135m", "prompt": "hello", "max_tokens": 400, "stream": True}
    async with ClientSession() as session:
        response = await session.post(server.make_url("/v1/completions"), json=body)
        await response.content.readuntil(b"\n\n")  # the first token is out
        response.close()

    await wait_for_abort(runtime)
    stats = runtime.engine.stats()
    assert stats.num_generated_tokens < 400
    assert stats.num_waiting == 0


async def test_a_waiting_non_streaming_client_that_leaves_frees_its_blocks(
    slow_server: tuple[TestServer, Runtime],
) -> None:
    server, runtime = slow_server
    body = {"model": "random-smollm2-135m", "prompt": "hello", "max_tokens": 400}
    async with ClientSession(timeout=ClientTimeout(total=1.0)) as session:
        with pytest.raises(TimeoutError):
            await session.post(server.make_url("/v1/completions"), json=body)

    await wait_for_abort(runtime)
    assert runtime.engine.stats().num_generated_tokens < 400
