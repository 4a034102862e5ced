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
    if "prompt" in body:
        prompt = body["prompt"]
        return prompt if isinstance(prompt, str) else json.dumps(prompt)
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


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
    status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 429:
        kind = "insufficient_quota" if code == "insufficient_quota" else "rate_limit_error"
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": code}},
        status=status,
        headers=headers,
    )
