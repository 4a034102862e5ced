"""The OpenAI-compatible HTTP surface (aiohttp), built by `create_app(config, runtime)`.

Routes: `POST /v1/chat/completions`, `POST /v1/completions` (JSON or SSE), `POST /v1/responses`
and `GET /v1/responses/{id}` (modelserver/responses_api.py), `POST /v1/embeddings`
(with `embeddings` on: modelserver/embeddings.py), `GET /v1/models`,
`GET /healthz`, `GET /readyz`, `GET /metrics`. The `_errors` middleware is the one place where
errors become OpenAI error objects. The engine thread starts with the app and stops with it
(`cleanup_ctx`); the caller binds the port only after `build_runtime` has loaded the model, so a
refused connection means "not ready yet".
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from modelserver.answer_stream import AnswerStream
from modelserver.completion_request import (
    CompletionRequest,
    parse_chat_request,
    parse_completion_request,
    sampling_params,
)
from modelserver.completion_response import JSON, ResponseBuilder
from modelserver.config import ModelServerConfig
from modelserver.embeddings import parse_embeddings_request
from modelserver.engine import GenerationRequest
from modelserver.engine_client import EngineClient
from modelserver.errors import (
    BodyTooLarge,
    ContextLengthExceeded,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    ModelServerError,
    NotFound,
    Overloaded,
)
from modelserver.metrics import CONTENT_TYPE, render_metrics
from modelserver.responses_api import (
    ResponseStore,
    ResponseWriter,
    answer_plain,
    answer_streamed,
    kept_response,
    parse_responses_request,
)
from modelserver.runtime import Runtime
from modelserver.text_output import TextAssembler, TokenText

logger = logging.getLogger(__name__)

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclass(frozen=True, slots=True)
class ServerState:
    config: ModelServerConfig
    runtime: Runtime
    client: EngineClient
    model_names: frozenset[str]
    """Names a request's `model` may use: the served name and the `--model` spelling."""
    created: int
    responses: ResponseStore
    """The Responses API's kept responses (modelserver/responses_api.py)."""


STATE = web.AppKey("state", ServerState)


def create_app(config: ModelServerConfig, runtime: Runtime) -> web.Application:
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[_errors])
    app[STATE] = ServerState(
        config=config,
        runtime=runtime,
        client=EngineClient(runtime.engine),
        model_names=frozenset({runtime.model_name, config.model}),
        created=int(time.time()),
        responses=ResponseStore(),
    )
    app.cleanup_ctx.append(_engine_thread)
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/responses", _responses)
    app.router.add_get("/v1/responses/{response_id}", _get_response)
    if runtime.embeddings is not None:
        app.cleanup_ctx.append(_embedding_thread)
        app.router.add_post("/v1/embeddings", _embeddings)
    app.router.add_get("/v1/models", _list_models)
    app.router.add_get("/v1/models/{model}", _get_model)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


async def _engine_thread(app: web.Application) -> AsyncIterator[None]:
    engine = app[STATE].runtime.engine
    engine.start()
    yield
    engine.stop()


async def _embedding_thread(app: web.Application) -> AsyncIterator[None]:
    embeddings = app[STATE].runtime.embeddings
    assert embeddings is not None, "the route exists only with an embedding model"
    embeddings.start()
    yield
    embeddings.stop()


# --- errors ----------------------------------------------------------------------------------


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except ModelServerError as exc:
        return error_response(exc)
    except web.HTTPNotFound:
        return error_response(NotFound(f"no route {request.method} {request.path}"))
    except web.HTTPMethodNotAllowed:
        return error_response(
            MethodNotAllowed(f"{request.method} is not allowed on {request.path}")
        )
    except web.HTTPRequestEntityTooLarge:
        return error_response(BodyTooLarge("the request body is too large"))
    except Exception:
        logger.exception("unexpected error serving %s %s", request.method, request.path)
        return error_response(ModelServerError("internal error; see the server log"))


def error_json(exc: ModelServerError) -> JSON:
    return {"error": {"message": exc.message, "type": exc.error_type, "code": exc.code}}


def error_response(exc: ModelServerError) -> web.Response:
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, Overloaded) else None
    return web.json_response(error_json(exc), status=exc.status, headers=headers)


# --- OpenAI routes ---------------------------------------------------------------------------


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    parsed = parse_chat_request(await _read_json(request))
    state = _state_for(request, parsed)
    tokenizer = state.runtime.tokenizer
    prompt_ids = tokenizer.encode(tokenizer.render_chat(parsed.messages), add_special_tokens=False)
    return await _generate(request, state, parsed, prompt_ids)


async def _completions(request: web.Request) -> web.StreamResponse:
    parsed = parse_completion_request(await _read_json(request))
    state = _state_for(request, parsed)
    if parsed.prompt_token_ids is not None:
        vocab_size = state.runtime.tokenizer.vocab_size
        if max(parsed.prompt_token_ids) >= vocab_size:
            raise InvalidRequest(f"prompt token ids must be below the vocabulary size {vocab_size}")
        prompt_ids = list(parsed.prompt_token_ids)
    else:
        assert parsed.prompt_text is not None, "the parser returns text or token ids"
        prompt_ids = state.runtime.tokenizer.encode(parsed.prompt_text, add_special_tokens=True)
    return await _generate(request, state, parsed, prompt_ids)


async def _responses(request: web.Request) -> web.StreamResponse:
    kept = request.app[STATE].responses
    parsed = parse_responses_request(await _read_json(request), kept)
    state = _state_for(request, parsed.completion)
    tokenizer = state.runtime.tokenizer
    rendered = tokenizer.render_chat(parsed.completion.messages)
    prompt_ids = tokenizer.encode(rendered, add_special_tokens=False)
    _builder, answer = _start(state, parsed.completion, prompt_ids)
    writer = ResponseWriter(parsed, state.runtime.model_name)
    if parsed.completion.stream:
        return await answer_streamed(request, parsed, writer, answer, kept, error_json)
    return await answer_plain(parsed, writer, answer, kept)


async def _get_response(request: web.Request) -> web.Response:
    kept = request.app[STATE].responses
    return web.json_response(kept_response(kept, request.match_info["response_id"]))


async def _embeddings(request: web.Request) -> web.Response:
    embeddings = request.app[STATE].runtime.embeddings
    assert embeddings is not None, "the route exists only with an embedding model"
    return web.json_response(
        await embeddings.embed(parse_embeddings_request(await _read_json(request)))
    )


async def _list_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    cards = [_model_card(state)]
    if state.runtime.embeddings is not None:
        name = state.runtime.embeddings.name
        cards.append({"id": name, "object": "model", "created": state.created, "owned_by": "deja"})
    return web.json_response({"object": "list", "data": cards})


async def _get_model(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if request.match_info["model"] not in state.model_names:
        raise ModelNotFound(f"The model '{request.match_info['model']}' does not exist")
    return web.json_response(_model_card(state))


def _model_card(state: ServerState) -> JSON:
    return {
        "id": state.runtime.model_name,
        "object": "model",
        "created": state.created,
        "owned_by": "deja",
        "max_model_len": state.runtime.max_model_len,
    }


# --- generation ------------------------------------------------------------------------------


async def _generate(
    request: web.Request, state: ServerState, parsed: CompletionRequest, prompt_ids: list[int]
) -> web.StreamResponse:
    builder, answer = _start(state, parsed, prompt_ids)
    if parsed.stream:
        return await _stream_response(request, builder, answer, parsed)
    tokens: list[TokenText] = []
    async with contextlib.aclosing(answer.deltas()) as deltas:
        async for _text, new_tokens in deltas:
            tokens.extend(new_tokens)  # the assembler keeps the whole text
    assert answer.finish_reason is not None, "the answer ended without a finish reason"
    body = builder.completion(
        answer.text, answer.finish_reason, tokens if parsed.logprobs else None, answer.usage()
    )
    return web.json_response(body)


def _start(
    state: ServerState, parsed: CompletionRequest, prompt_ids: list[int]
) -> tuple[ResponseBuilder, AnswerStream]:
    """The request submitted to the engine (raises at once: context too long, queue full,
    engine down; no byte is sent yet), and its answer to read."""
    max_model_len = state.runtime.max_model_len
    if not prompt_ids:
        raise InvalidRequest("the prompt is empty")
    if len(prompt_ids) >= max_model_len:
        raise ContextLengthExceeded(
            f"this model's maximum context length is {max_model_len} tokens, and the prompt "
            f"has {len(prompt_ids)}"
        )
    max_tokens = parsed.max_tokens or min(
        state.config.default_max_tokens, max_model_len - len(prompt_ids)
    )
    tokenizer = state.runtime.tokenizer
    sampling = sampling_params(
        parsed, state.config, max_tokens=max_tokens, stop_token_ids=tokenizer.stop_token_ids
    )
    builder = ResponseBuilder(
        chat=parsed.chat,
        model=state.runtime.model_name,
        created=int(time.time()),
        tokenizer=tokenizer,
        include_usage=parsed.stream and parsed.include_usage,
    )
    assembler = TextAssembler(tokenizer, parsed.stop, tokenizer.stop_token_ids)
    # Submitting raises at once (context too long, queue full, engine down): no byte is sent yet.
    stream = state.client.generate(
        GenerationRequest(builder.id, tuple(prompt_ids), sampling, parsed.cache_salt)
    )
    return builder, AnswerStream(stream, assembler, len(prompt_ids))


async def _stream_response(
    request: web.Request, builder: ResponseBuilder, answer: AnswerStream, parsed: CompletionRequest
) -> web.StreamResponse:
    response = web.StreamResponse(headers=_SSE_HEADERS)
    deltas = answer.deltas()
    try:
        async with contextlib.aclosing(deltas):
            await response.prepare(request)
            send = _sse_sender(response)
            first = builder.first_chunk()
            if first is not None:
                await send(first)
            async for text, tokens in deltas:
                if text or tokens:
                    await send(builder.delta_chunk(text, tokens if parsed.logprobs else None, None))
            assert answer.finish_reason is not None, "the stream ended without a finish reason"
            await send(builder.delta_chunk("", None, answer.finish_reason))
            if parsed.include_usage:
                await send(builder.usage_chunk(answer.usage()))
            await response.write(b"data: [DONE]\n\n")
    except ModelServerError as exc:
        # The headers are sent already: report in-band, and leave out [DONE] so the proxy can
        # tell the answer is incomplete.
        await _sse_sender(response)(error_json(exc))
    except ConnectionResetError:
        logger.info("client left during %s; its request was aborted", builder.id)
    return response


def _sse_sender(response: web.StreamResponse) -> Callable[[JSON], Awaitable[None]]:
    async def send(event: JSON) -> None:
        await response.write(b"data: " + json.dumps(event).encode("utf-8") + b"\n\n")

    return send


# --- plumbing --------------------------------------------------------------------------------


async def _read_json(request: web.Request) -> object:
    body = await request.read()
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from exc


def _state_for(request: web.Request, parsed: CompletionRequest) -> ServerState:
    state = request.app[STATE]
    if parsed.model not in state.model_names:
        raise ModelNotFound(
            f"The model '{parsed.model}' does not exist; this server serves "
            f"'{state.runtime.model_name}'"
        )
    return state


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    stats = state.client.stats()
    body = {
        "status": "ready" if stats.alive else "engine stopped",
        "model": state.runtime.model_name,
        "device": str(state.runtime.device),
        "kv_blocks": stats.num_blocks,
        "block_size": state.runtime.block_size,
        "max_model_len": state.runtime.max_model_len,
    }
    return web.json_response(body, status=200 if stats.alive else 503)


async def _metrics(request: web.Request) -> web.Response:
    body = render_metrics(request.app[STATE].client.stats)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
