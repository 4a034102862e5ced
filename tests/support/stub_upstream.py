"""A small OpenAI-wire-format server for tests and benchmarks: the fake at the upstream seam.

It answers deterministically from the request (by default "Answer to: <last user text>"),
streams word by word, returns logprobs, usage and tool calls like OpenAI does, and can be told
to misbehave: fail with a status, hang, drop the connection mid-stream, truncate (length).
Every request it receives is recorded in `calls`.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tests.support.stub_embeddings import embeddings_body

# Request key: the middleware decided this request gets the configured failure.
_FAILING = web.RequestKey("stub_failing", bool)


def last_user_text(body: dict[str, Any]) -> str:
    if "input" in body:
        return _last_input_text(body["input"])
    if "prompt" in body:
        prompt = body["prompt"]
        return prompt if isinstance(prompt, str) else json.dumps(prompt)
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def _last_input_text(value: Any) -> str:
    """A Responses request's last user text: the string, or its last user message's text."""
    if isinstance(value, str):
        return value
    for item in reversed(value if isinstance(value, list) else []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(
                str(part.get("text")) for part in content or [] if part.get("type") == "input_text"
            )
    return json.dumps(value)


@dataclass
class Behaviour:
    answer: Callable[[dict[str, Any]], str] = lambda body: f"Answer to: {last_user_text(body)}"
    status: int = 200  # a non-2xx status answers with an OpenAI error object
    finish_reason: str = "stop"
    delay_s: float = 0.0  # before the response headers
    chunk_delay_s: float = 0.0  # between streamed chunks
    drop_after_chunks: int | None = None  # close the connection mid-stream
    hang: bool = False  # never answer
    tool_calls: list[dict[str, Any]] | None = None
    # Lower the chosen-token probability to make answers look uncertain (for TTL tests).
    token_probability: float = 0.9
    reject_logprobs: bool = False
    # A 200 answer with this JSON body instead of a completion (an error body, say).
    body: dict[str, Any] | None = None
    # (n, payload): after n streamed chunks, send `data: <payload>` (an error event, garbage).
    inject_event: tuple[int, str] | None = None
    # With `failures` set, only the first that many requests (every route, pass-through ones
    # too) get `status`, the later ones their normal answer; None: `status` applies to every
    # completion request. The error object carries `error_code`, its response `error_headers`
    # (a 429's Retry-After, say).
    failures: int | None = None
    error_code: str | None = None
    error_headers: dict[str, str] = field(default_factory=dict)
    # /v1/responses: the status a response ends with ("completed", "incomplete", "failed"),
    # plain or streamed (then its terminal event is response.<status>).
    response_status: str = "completed"


@dataclass
class StubUpstream:
    behaviour: Behaviour = field(default_factory=Behaviour)
    calls: list[dict[str, Any]] = field(default_factory=list)
    headers_seen: list[dict[str, str]] = field(default_factory=list)
    active: int = 0
    cancelled: int = 0
    _runner: web.AppRunner | None = None
    port: int = 0
    # The API's base path: "/v1" like OpenAI, or e.g. "/v1beta/openai", "/api/v1".
    prefix: str = "/v1"
    # The path of every request received, in order, and when (time.monotonic()).
    paths: list[str] = field(default_factory=list)
    arrivals_s: list[float] = field(default_factory=list)
    failed: int = 0
    # /v1/responses kept by id (every one whose request did not say `store: false`).
    stored_responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Every embeddings call's `input`, as a list of inputs, in order.
    embedding_calls: list[list[Any]] = field(default_factory=list)
    # Every upload's body size in bytes (counted as it streams in, never held).
    uploaded_bytes: list[int] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    async def start(self, port: int = 0) -> str:
        app = web.Application(middlewares=[self._record_path])
        app.router.add_post(f"{self.prefix}/chat/completions", self._chat)
        app.router.add_post(f"{self.prefix}/completions", self._completions)
        app.router.add_get(f"{self.prefix}/models", self._models)
        app.router.add_post(f"{self.prefix}/responses", self._responses)
        app.router.add_get(f"{self.prefix}/responses/{{response_id}}", self._get_response)
        app.router.add_post(f"{self.prefix}/embeddings", self._embeddings)
        app.router.add_post(f"{self.prefix}/files", self._upload)
        app.router.add_route("*", f"{self.prefix}/echo/{{tail:.*}}", self._echo)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        return self.base_url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record_path(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.paths.append(request.path)
        self.arrivals_s.append(time.monotonic())
        b = self.behaviour
        failing = b.failures is not None and self.failed < b.failures
        self.failed += failing
        request[_FAILING] = failing
        return await handler(request)

    def _failure(self) -> web.Response:
        b = self.behaviour
        return _error(b.status, f"stub failure {b.status}", b.error_code, b.error_headers)

    def completion_calls(self) -> int:
        return sum(1 for c in self.calls if c.get("_route") in ("chat", "completions"))

    def response_calls(self) -> int:
        return sum(1 for c in self.calls if c.get("_route") == "responses")

    async def _models(self, request: web.Request) -> web.Response:
        if request[_FAILING]:
            return self._failure()
        return web.json_response(
            {"object": "list", "data": [{"id": "stub-model", "object": "model"}]}
        )

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.headers_seen.append(dict(request.headers))
        b = self.behaviour
        if b.delay_s:
            await asyncio.sleep(b.delay_s)
        if b.status >= 300 and (b.failures is None or request[_FAILING]):
            return self._failure()
        answer = embeddings_body(body)
        if answer is None:
            return _error(400, "'input' must be a string or an array", "invalid_input")
        raw = body["input"]
        single = isinstance(raw, str) or (raw and isinstance(raw[0], int))
        self.embedding_calls.append([raw] if single else list(raw))
        status, payload = answer
        return web.Response(status=status, body=payload, content_type="application/json")

    async def _upload(self, request: web.Request) -> web.Response:
        """/v1/files: counts the body's bytes as they arrive and answers a file object."""
        received = 0
        async for chunk in request.content.iter_any():
            received += len(chunk)
        self.uploaded_bytes.append(received)
        return web.json_response(
            {
                "id": f"file-{len(self.uploaded_bytes)}",
                "object": "file",
                "bytes": received,
                "created_at": int(time.time()),
                "filename": "upload",
                "purpose": "batch",
                "status": "processed",
            }
        )

    async def _echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request[_FAILING]:
            return self._failure()
        self.calls.append({"_route": "echo", "method": request.method, "path": request.path})
        self.headers_seen.append(dict(request.headers))
        return web.json_response(
            {
                "method": request.method,
                "path": request.path,
                "query": request.query_string,
                "body": body.decode(),
                "authorization": request.headers.get("Authorization"),
            }
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "chat")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "completions")

    async def _serve(self, request: web.Request, route: str) -> web.StreamResponse:
        body = await request.json()
        self.calls.append({"_route": route, **body})
        self.headers_seen.append(dict(request.headers))
        b = self.behaviour
        self.active += 1
        try:
            if b.hang:
                await asyncio.sleep(3600)
            if b.delay_s:
                await asyncio.sleep(b.delay_s)
            if b.status >= 300 and (b.failures is None or request[_FAILING]):
                return self._failure()
            if b.body is not None:
                return web.json_response(b.body)
            wants_logprobs = bool(body.get("logprobs"))
            if wants_logprobs and b.reject_logprobs:
                return _error(400, "logprobs are not supported by this stub")
            words = _words(b.answer(body))
            if body.get("stream"):
                return await self._stream(request, route, body, words)
            return web.json_response(self._completion(route, body, words))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    def _completion(self, route: str, body: dict[str, Any], words: list[str]) -> dict[str, Any]:
        b = self.behaviour
        text = "".join(words)
        choice: dict[str, Any] = {"index": 0, "finish_reason": b.finish_reason, "logprobs": None}
        if route == "chat":
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text if not b.tool_calls else None,
            }
            if b.tool_calls:
                message["tool_calls"] = b.tool_calls
                choice["finish_reason"] = "tool_calls"
            choice["message"] = message
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [self._token_logprob(w, body) for w in words],
                    "refusal": None,
                }
        else:
            choice["text"] = text
            if body.get("logprobs"):
                choice["logprobs"] = self._text_logprobs(words, int(body["logprobs"]))
        return {
            "id": f"stub-{time.monotonic_ns()}",
            "object": "chat.completion" if route == "chat" else "text_completion",
            "created": int(time.time()),
            "model": body.get("model", "stub-model"),
            "system_fingerprint": "fp_stub",
            "choices": [choice],
            "usage": {
                "prompt_tokens": 7,
                "completion_tokens": len(words),
                "total_tokens": 7 + len(words),
            },
        }

    def _token_logprob(self, word: str, body: dict[str, Any]) -> dict[str, Any]:
        p = self.behaviour.token_probability
        k = min(20, int(body.get("top_logprobs") or 0))  # OpenAI's own limit
        rest = [(1 - p) / max(1, k - 1)] * max(0, k - 1)
        top = [{"token": word, "logprob": math.log(p), "bytes": list(word.encode())}]
        top += [
            {"token": f"alt{i}", "logprob": math.log(q), "bytes": None} for i, q in enumerate(rest)
        ]
        return {
            "token": word,
            "logprob": math.log(p),
            "bytes": list(word.encode()),
            "top_logprobs": top[:k],
        }

    def _text_logprobs(self, words: list[str], k: int) -> dict[str, Any]:
        p = self.behaviour.token_probability
        offsets, at = [], 0
        for w in words:
            offsets.append(at)
            at += len(w)
        return {
            "tokens": words,
            "token_logprobs": [math.log(p)] * len(words),
            "top_logprobs": [{w: math.log(p)} for w in words] if k else None,
            "text_offset": offsets,
        }

    async def _stream(
        self, request: web.Request, route: str, body: dict[str, Any], words: list[str]
    ) -> web.StreamResponse:
        b = self.behaviour
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        full = self._completion(route, body, words)
        base = {
            "id": full["id"],
            "created": full["created"],
            "model": full["model"],
            "system_fingerprint": "fp_stub",
            "object": "chat.completion.chunk" if route == "chat" else "text_completion",
        }
        usage = (body.get("stream_options") or {}).get("include_usage") is True
        extra = {"usage": None} if usage else {}
        choice0 = full["choices"][0]
        chunks: list[dict[str, Any]] = []
        if route == "chat":
            chunks.append(
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            )
            if b.tool_calls:
                for i, call in enumerate(b.tool_calls):
                    args = call["function"]["arguments"]
                    half = len(args) // 2
                    chunks.append(
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {
                                        "index": i,
                                        "id": call["id"],
                                        "type": "function",
                                        "function": {
                                            "name": call["function"]["name"],
                                            "arguments": args[:half],
                                        },
                                    }
                                ]
                            },
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    )
                    chunks.append(
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [{"index": i, "function": {"arguments": args[half:]}}]
                            },
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    )
            else:
                lps = (choice0.get("logprobs") or {}).get("content") or [None] * len(words)
                for word, lp in zip(words, lps, strict=True):
                    chunks.append(
                        {
                            "index": 0,
                            "delta": {"content": word},
                            "logprobs": {"content": [lp], "refusal": None} if lp else None,
                            "finish_reason": None,
                        }
                    )
            chunks.append(
                {
                    "index": 0,
                    "delta": {},
                    "logprobs": None,
                    "finish_reason": choice0["finish_reason"],
                }
            )
        else:
            for i, word in enumerate(words):
                last = i == len(words) - 1
                chunks.append(
                    {
                        "index": 0,
                        "text": word,
                        "logprobs": None,
                        "finish_reason": choice0["finish_reason"] if last else None,
                    }
                )
        for n, piece in enumerate(chunks):
            if b.inject_event is not None and n == b.inject_event[0]:
                await response.write(f"data: {b.inject_event[1]}\n\n".encode())
            if b.drop_after_chunks is not None and n >= b.drop_after_chunks:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write(
                f"data: {json.dumps({**base, 'choices': [piece], **extra})}\n\n".encode()
            )
            if b.chunk_delay_s:
                await asyncio.sleep(b.chunk_delay_s)
        if usage:
            await response.write(
                f"data: {json.dumps({**base, 'choices': [], 'usage': full['usage']})}\n\n".encode()
            )
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # The Responses API (/v1/responses), as OpenAI documents it: a response object, or its
    # typed event stream; kept by id unless `store: false`; continued with
    # `previous_response_id`, which must name a kept response.

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.calls.append({"_route": "responses", **body})
        self.headers_seen.append(dict(request.headers))
        b = self.behaviour
        self.active += 1
        try:
            if b.hang:
                await asyncio.sleep(3600)
            if b.delay_s:
                await asyncio.sleep(b.delay_s)
            if b.status >= 300 and (b.failures is None or request[_FAILING]):
                return self._failure()
            previous = body.get("previous_response_id")
            if previous is not None and previous not in self.stored_responses:
                return _error(
                    400,
                    f"Previous response with id '{previous}' not found.",
                    "previous_response_not_found",
                    param="previous_response_id",
                )
            words = _words(b.answer(body))
            response = self._response(body, words)
            if body.get("store") is not False:
                self.stored_responses[response["id"]] = response
            if body.get("background") is True:
                return web.json_response({**response, "status": "queued", "output": []})
            if body.get("stream"):
                return await self._stream_response(request, response, words)
            return web.json_response(response)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    async def _get_response(self, request: web.Request) -> web.Response:
        response_id = request.match_info["response_id"]
        self.calls.append({"_route": "get_response", "id": response_id})
        response = self.stored_responses.get(response_id)
        if response is None:
            return _error(404, f"Response with id '{response_id}' not found.")
        return web.json_response(response)

    def _response(self, body: dict[str, Any], words: list[str]) -> dict[str, Any]:
        b = self.behaviour
        stamp = time.monotonic_ns()
        output: list[dict[str, Any]] = [
            {
                "type": "message",
                "id": f"msg_{stamp}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "".join(words), "annotations": []}],
            }
        ]
        if b.tool_calls:
            output = [
                {
                    "type": "function_call",
                    "id": f"fc_{stamp}_{i}",
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                    "status": "completed",
                }
                for i, call in enumerate(b.tool_calls)
            ]
        status = b.response_status
        return {
            "id": f"resp_{stamp:x}",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "error": {"code": "server_error", "message": "stub failure"}
            if status == "failed"
            else None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": body.get("instructions"),
            "model": body.get("model", "stub-model"),
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "store": body.get("store") is not False,
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": {
                "input_tokens": 7,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": len(words),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 7 + len(words),
            },
            "metadata": body.get("metadata") or {},
        }

    async def _stream_response(
        self, request: web.Request, full: dict[str, Any], words: list[str]
    ) -> web.StreamResponse:
        b = self.behaviour
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        shell = {**full, "status": "in_progress", "output": [], "usage": None}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": shell},
            {"type": "response.in_progress", "response": shell},
        ]
        for index, item in enumerate(full["output"]):
            events.extend(_item_events(index, item, words))
        events.append({"type": f"response.{full['status']}", "response": full})
        for n, event in enumerate(events):
            if b.inject_event is not None and n == b.inject_event[0]:
                await response.write(f"data: {b.inject_event[1]}\n\n".encode())
            if b.drop_after_chunks is not None and n >= b.drop_after_chunks:
                assert request.transport is not None
                request.transport.close()
                return response
            data = json.dumps({**event, "sequence_number": n}, ensure_ascii=False)
            await response.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
            if b.chunk_delay_s:
                await asyncio.sleep(b.chunk_delay_s)
        await response.write_eof()
        return response


def _item_events(index: int, item: dict[str, Any], words: list[str]) -> list[dict[str, Any]]:
    """One output item's events: added, its content streamed (text word by word), done."""
    where = {"item_id": item["id"], "output_index": index}
    if item["type"] == "function_call":
        args = item["arguments"]
        half = len(args) // 2
        return [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "arguments": "", "status": "in_progress"},
            },
            {"type": "response.function_call_arguments.delta", **where, "delta": args[:half]},
            {"type": "response.function_call_arguments.delta", **where, "delta": args[half:]},
            {"type": "response.function_call_arguments.done", **where, "arguments": args},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    part = item["content"][0]
    at = {**where, "content_index": 0}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "content": [], "status": "in_progress"},
        },
        {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
        *(
            {"type": "response.output_text.delta", **at, "delta": word, "logprobs": []}
            for word in words
        ),
        {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _words(text: str) -> list[str]:
    """Splits text into word pieces that concatenate back to it (spaces stay on the words)."""
    pieces, current = [], ""
    for ch in text:
        current += ch
        if ch == " ":
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    return pieces or [""]


def _error(
    status: int,
    message: str,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    param: str | None = None,
) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 429:
        kind = "insufficient_quota" if code == "insufficient_quota" else "rate_limit_error"
    error: dict[str, Any] = {"message": message, "type": kind, "code": code}
    if param is not None:
        error["param"] = param
    return web.json_response({"error": error}, status=status, headers=headers)
