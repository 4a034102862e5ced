"""The Responses API on the model server: `POST /v1/responses` and `GET /v1/responses/{id}`.

A Responses request is read into the same CompletionRequest a chat request is: `instructions`
become the system turn, the input (a string, or message items with text parts) the turns after
it, and with `previous_response_id` the kept conversation goes before them. The answer is
written as a response object, or as its typed event stream (`response.created` …
`response.completed` or `response.incomplete`, each with its `sequence_number`), the shapes
OpenAI documents and Deja's proxy caches. Responses are kept unless `store: false`, in memory
and bounded (`KEPT_RESPONSES`, oldest forgotten first), so chains and retrieval work as they do
upstream for as long as the process runs.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from modelserver.answer_stream import AnswerStream
from modelserver.completion_request import CompletionRequest, parse_chat_request
from modelserver.completion_response import JSON
from modelserver.errors import InvalidRequest, ModelServerError, NotFound, UnsupportedParameter
from modelserver.tokenizer import ChatMessage

KEPT_RESPONSES = 1_000
_ROLES = {"system", "developer", "user", "assistant"}
_TEXT_PARTS = {"input_text", "output_text", "text"}
# Accepted and echoed, but with no effect on a local model.
_IGNORED = {"include", "metadata", "parallel_tool_calls", "reasoning", "service_tier", "user"}


@dataclass(frozen=True, slots=True)
class KeptResponse:
    conversation: tuple[ChatMessage, ...]  # every turn, the answer included
    body: JSON


class ResponseStore:
    """The responses kept for `previous_response_id` and `GET /v1/responses/{id}`."""

    def __init__(self, capacity: int = KEPT_RESPONSES) -> None:
        self._capacity = capacity
        self._kept: OrderedDict[str, KeptResponse] = OrderedDict()

    def keep(self, response_id: str, kept: KeptResponse) -> None:
        self._kept[response_id] = kept
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)

    def get(self, response_id: str) -> KeptResponse | None:
        return self._kept.get(response_id)


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    completion: CompletionRequest
    store: bool
    fields: dict[str, Any]  # the request as sent: what the response echoes


def parse_responses_request(body: object, kept: ResponseStore) -> ResponsesRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    if body.get("tools"):
        raise UnsupportedParameter("'tools' is not supported by the Deja model server")
    for name in ("background", "conversation", "prompt"):
        if body.get(name):
            raise UnsupportedParameter(f"'{name}' is not supported by the Deja model server")
    text_format = (
        (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    )
    if isinstance(text_format, dict) and text_format.get("type", "text") != "text":
        raise UnsupportedParameter("only 'text': {'format': {'type': 'text'}} is supported")
    store = body.get("store") is not False
    history: tuple[ChatMessage, ...] = ()
    previous = body.get("previous_response_id")
    if previous is not None:
        found = kept.get(previous) if isinstance(previous, str) else None
        if found is None:
            raise InvalidRequest(f"Previous response with id '{previous}' not found.")
        history = tuple(m for m in found.conversation if m.role != "system")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("'instructions' must be a string")
    turns = [*history, *_input(body.get("input"))]
    messages = [{"role": m.role, "content": m.content} for m in turns]
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    chat = {
        "model": body.get("model"),
        "messages": messages,
        "stream": body.get("stream", False),
        **{k: body[k] for k in ("temperature", "top_p", "seed") if body.get(k) is not None},
    }
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    return ResponsesRequest(parse_chat_request(chat), store, body)


def _input(value: object) -> list[ChatMessage]:
    if isinstance(value, str):
        if not value:
            raise InvalidRequest("'input' must not be empty")
        return [ChatMessage("user", value)]
    if not isinstance(value, list) or not value:
        raise InvalidRequest("'input' must be a string or a non-empty array of items")
    return [_item(index, item) for index, item in enumerate(value)]


def _item(index: int, item: object) -> ChatMessage:
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        raise UnsupportedParameter(f"input[{index}]: only message items are supported")
    role = item.get("role")
    if role not in _ROLES:
        raise InvalidRequest(f"input[{index}].role must be one of {sorted(_ROLES)}")
    content = item.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
                raise UnsupportedParameter(f"input[{index}]: only text content is supported")
            if not isinstance(part.get("text"), str):
                raise InvalidRequest(f"input[{index}]: a text part needs a 'text' string")
            parts.append(part["text"])
        text = "".join(parts)
    else:
        raise InvalidRequest(f"input[{index}].content must be a string or an array of parts")
    return ChatMessage("system" if role == "developer" else str(role), text)


class ResponseWriter:
    """One response's object and events, from its request and the engine's answer."""

    def __init__(self, request: ResponsesRequest, model: str) -> None:
        self._request = request
        self._model = model
        self.id = "resp_" + secrets.token_hex(12)
        self._message_id = "msg_" + secrets.token_hex(12)
        self._created_at = int(time.time())

    def body(self, answer: AnswerStream | None) -> JSON:
        """The response object: in progress (no answer yet), or as the answer ended."""
        fields = self._request.fields
        done = answer is not None and answer.finish_reason is not None
        incomplete = done and answer is not None and answer.finish_reason == "length"
        status = "in_progress" if not done else "incomplete" if incomplete else "completed"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self._created_at,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": fields.get("instructions"),
            "max_output_tokens": fields.get("max_output_tokens"),
            "model": self._model,
            "output": [self.item(answer)] if done and answer is not None else [],
            "parallel_tool_calls": True,
            "previous_response_id": fields.get("previous_response_id"),
            "store": self._request.store,
            "temperature": fields.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": fields.get("top_p", 1.0),
            "truncation": fields.get("truncation", "disabled"),
            "usage": _usage(answer) if done and answer is not None else None,
            "metadata": fields.get("metadata") or {},
        }

    def item(self, answer: AnswerStream | None, *, streaming: bool = False) -> JSON:
        status = "in_progress" if streaming else "completed"
        content = [] if answer is None else [self.part(answer.text)]
        return {
            "type": "message",
            "id": self._message_id,
            "status": status,
            "role": "assistant",
            "content": content,
        }

    @staticmethod
    def part(text: str) -> JSON:
        return {"type": "output_text", "text": text, "annotations": []}

    def where(self) -> JSON:
        return {"item_id": self._message_id, "output_index": 0, "content_index": 0}


def _usage(answer: AnswerStream) -> JSON:
    usage = answer.usage()
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def keep(
    store: ResponseStore,
    request: ResponsesRequest,
    writer: ResponseWriter,
    body: JSON,
    answer: AnswerStream,
) -> None:
    """Keep a finished response (unless `store: false`), its conversation with it."""
    if not request.store:
        return
    messages = request.completion.messages
    store.keep(writer.id, KeptResponse((*messages, ChatMessage("assistant", answer.text)), body))


async def answer_plain(
    request: ResponsesRequest, writer: ResponseWriter, answer: AnswerStream, kept: ResponseStore
) -> web.Response:
    async with contextlib.aclosing(answer.deltas()) as deltas:
        async for _ in deltas:
            pass
    body = writer.body(answer)
    keep(kept, request, writer, body, answer)
    return web.json_response(body)


async def answer_streamed(
    http: web.Request,
    request: ResponsesRequest,
    writer: ResponseWriter,
    answer: AnswerStream,
    kept: ResponseStore,
    error_json: Callable[[ModelServerError], JSON],
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    send = _event_sender(response)
    where = writer.where()
    async with contextlib.aclosing(answer.deltas()) as deltas:
        await response.prepare(http)
        try:
            shell = writer.body(None)
            await send("response.created", {"response": shell})
            await send("response.in_progress", {"response": shell})
            item = writer.item(None, streaming=True)
            await send("response.output_item.added", {"output_index": 0, "item": item})
            part = writer.part("")
            await send("response.content_part.added", {**where, "part": part})
            async for text, _tokens in deltas:
                if text:
                    await send("response.output_text.delta", {**where, "delta": text})
            body = writer.body(answer)
            await send("response.output_text.done", {**where, "text": answer.text})
            await send("response.content_part.done", {**where, "part": writer.part(answer.text)})
            await send(
                "response.output_item.done", {"output_index": 0, "item": writer.item(answer)}
            )
            keep(kept, request, writer, body, answer)
            await send(f"response.{body['status']}", {"response": body})
        except ModelServerError as exc:
            # The headers are sent: report in-band, as the API's error event does.
            error = error_json(exc)["error"]
            await send(
                "error",
                {"code": error["code"], "message": error["message"], "param": None, "error": error},
            )
    return response


def _event_sender(response: web.StreamResponse) -> Callable[[str, JSON], Awaitable[None]]:
    sequence = iter(range(1 << 62))

    async def send(kind: str, event: JSON) -> None:
        data = json.dumps({"type": kind, **event, "sequence_number": next(sequence)})
        await response.write(f"event: {kind}\ndata: {data}\n\n".encode())

    return send


def kept_response(kept: ResponseStore, response_id: str) -> JSON:
    found = kept.get(response_id)
    if found is None:
        raise NotFound(f"Response with id '{response_id}' not found.")
    return found.body
