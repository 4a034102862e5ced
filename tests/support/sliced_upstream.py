"""An upstream whose bytes arrive cut anywhere, as TLS records and proxies deliver them.

It answers chat and text completions and the Responses API with a fixed text per question, in
raw UTF-8 (as most upstreams send it; `stub_upstream` writes `\\u` escapes in chat streams, which
never cut a character). A stream is written in slices of 1 to `max_slice_bytes` bytes, each
followed by a pause so the reader takes it in a read of its own: the slices cut multi-byte
characters and split a CRLF between two reads. Its lines end with `line_end` (LF, CRLF or a lone
CR, all legal SSE).
What it cut is counted, so a test can check that it did cut what it means to test.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.support.stub_upstream import last_user_text

PIECE_CHARS = 3  # characters of the answer per streamed chunk


@dataclass
class SlicedUpstream:
    answers: dict[str, str]  # question → answer
    line_end: str = "\n"
    max_slice_bytes: int = 3
    pause_s: float = 0.002  # after a slice that ends inside a character or a CRLF
    seed: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)
    cut_characters: int = 0  # slice boundaries inside a multi-byte character
    cut_crlfs: int = 0  # slice boundaries between the CR and LF of a line end
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/responses", self._responses)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        return self.base_url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "chat")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "completions")

    async def _serve(self, request: web.Request, route: str) -> web.StreamResponse:
        body = await request.json()
        self.calls.append({"_route": route, **body})
        answer = self.answers[last_user_text(body)]
        head: dict[str, Any] = {
            "id": f"sliced-{time.monotonic_ns()}",
            "created": int(time.time()),
            "model": body.get("model", "sliced-model"),
        }
        if not body.get("stream"):
            return web.Response(
                body=orjson.dumps(_completion(route, head, answer)), content_type="application/json"
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events = [orjson.dumps(chunk).decode() for chunk in _chunks(route, head, answer)] + [
            "[DONE]"
        ]
        eol = self.line_end
        stream = "".join(f"data: {event}{eol}{eol}" for event in events).encode()
        await self._write_sliced(response, stream)
        await response.write_eof()
        return response

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.calls.append({"_route": "responses", **body})
        answer = self.answers[last_user_text(body)]
        full = _response(body, answer)
        if not body.get("stream"):
            return web.Response(body=orjson.dumps(full), content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        eol = self.line_end
        stream = "".join(
            f"event: {event['type']}{eol}data: {orjson.dumps(event).decode()}{eol}{eol}"
            for event in _response_events(full, answer)
        ).encode()
        await self._write_sliced(response, stream)
        await response.write_eof()
        return response

    async def _write_sliced(self, response: web.StreamResponse, stream: bytes) -> None:
        rng = random.Random(self.seed + len(self.calls))
        at = 0
        while at < len(stream):
            end = min(len(stream), at + rng.randint(1, self.max_slice_bytes))
            await response.write(stream[at:end])
            cut = False
            if end < len(stream):
                cut_character = 0x80 <= stream[end] < 0xC0  # the next byte continues one
                cut_crlf = stream[end - 1 : end + 1] == b"\r\n"
                self.cut_characters += cut_character
                self.cut_crlfs += cut_crlf
                cut = cut_character or cut_crlf
            # Yielding lets the reader take what was sent, though two slices may still join in
            # one read; a real pause after the cuts that matter makes sure they arrive alone.
            await asyncio.sleep(self.pause_s if cut else 0)
            at = end


def _completion(route: str, head: dict[str, Any], answer: str) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
    if route == "chat":
        choice["message"] = {"role": "assistant", "content": answer}
    else:
        choice["text"] = answer
    usage = {"prompt_tokens": 5, "completion_tokens": len(answer), "total_tokens": 5 + len(answer)}
    kind = "chat.completion" if route == "chat" else "text_completion"
    return {**head, "object": kind, "choices": [choice], "usage": usage}


def _chunks(route: str, head: dict[str, Any], answer: str) -> list[dict[str, Any]]:
    pieces = [answer[i : i + PIECE_CHARS] for i in range(0, len(answer), PIECE_CHARS)]
    if route == "chat":
        base = {**head, "object": "chat.completion.chunk"}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": piece} for piece in pieces]
        chunks = [
            {**base, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]}
            for d in deltas
        ]
        end = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
        return [*chunks, {**base, "choices": [end]}]
    base = {**head, "object": "text_completion"}
    return [
        {
            **base,
            "choices": [
                {
                    "index": 0,
                    "text": piece,
                    "logprobs": None,
                    "finish_reason": "stop" if i == len(pieces) - 1 else None,
                }
            ],
        }
        for i, piece in enumerate(pieces)
    ]


def _response(body: dict[str, Any], answer: str) -> dict[str, Any]:
    message = {
        "type": "message",
        "id": f"msg_{time.monotonic_ns()}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": answer, "annotations": []}],
    }
    return {
        "id": f"resp_{time.monotonic_ns()}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": body.get("model", "sliced-model"),
        "output": [message],
        "usage": {"input_tokens": 5, "output_tokens": len(answer), "total_tokens": 5 + len(answer)},
    }


def _response_events(full: dict[str, Any], answer: str) -> list[dict[str, Any]]:
    message = full["output"][0]
    part = message["content"][0]
    shell = {**full, "status": "in_progress", "output": []}
    at = {"item_id": message["id"], "output_index": 0, "content_index": 0}
    pieces = [answer[i : i + PIECE_CHARS] for i in range(0, len(answer), PIECE_CHARS)]
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": shell},
        {"type": "response.in_progress", "response": shell},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**message, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
        *({"type": "response.output_text.delta", **at, "delta": p} for p in pieces),
        {"type": "response.output_text.done", **at, "text": answer},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.completed", "response": full},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]
