"""The Responses API's event stream: relayed as typed events, folded into the response, replayed.

A Responses stream is a sequence of typed events, each `event: <type>` and `data: <JSON with that
"type" and a "sequence_number">`, with no `[DONE]`: it ends with its terminal event, one of
`response.completed`, `response.failed` or `response.incomplete`, which carries the whole response.
`ResponseAssembler` keeps that response (filling in `output` from the `output_item.done` events
where an upstream leaves it out); `replay_events` does the reverse for a cached response, so a hit
can be streamed whichever way it was stored:

    response.created ─▶ response.in_progress ─▶ per output item:
        output_item.added ─▶ (message) per part: content_part.added ─▶ output_text.delta … ─▶
        output_text.done ─▶ content_part.done; (function call) function_call_arguments.delta
        ─▶ …done ─▶ output_item.done
    ─▶ response.completed
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from normalize.keys.request import Route
from proxy.protocol.sse import (
    CompletionAssembler,
    StreamAssembler,
    dumps,
    encode_event,
    text_pieces,
)

CREATED = "response.created"
TERMINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})
ERROR_EVENT = "error"


def encode_typed_event(payload: str, obj: dict[str, Any] | None) -> bytes:
    """One event as the Responses API writes it: its type on an `event:` line, then the data."""
    kind = obj.get("type") if obj is not None else None
    if not isinstance(kind, str) or not kind or "\n" in kind or "\r" in kind:
        return encode_event(payload)
    return f"event: {kind}\n".encode() + encode_event(payload)


def assembler_for(route: Route) -> StreamAssembler:
    """The assembler of a route's streams."""
    return ResponseAssembler() if route is Route.RESPONSES else CompletionAssembler(route)


class ResponseAssembler:
    """Folds a Responses stream's events into the response its terminal event carries."""

    def __init__(self) -> None:
        self._terminal: dict[str, Any] | None = None
        self._done_items: dict[int, Any] = {}
        # A `[DONE]` line (not part of the Responses API) proves nothing here: only the
        # terminal event ends the stream.
        self.saw_done = False
        self.error: Any = None

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == ERROR_EVENT or ("error" in event and kind is None):
            self.error = event.get("error") or event
        elif kind == "response.output_item.done" and isinstance(event.get("output_index"), int):
            self._done_items[event["output_index"]] = event.get("item")
        elif kind in TERMINAL_EVENTS and isinstance(event.get("response"), dict):
            response = event["response"]
            # The event's type says how it ended, should its response leave `status` out.
            status = response.get("status") or str(kind).removeprefix("response.")
            self._terminal = response if "status" in response else {**response, "status": status}

    @property
    def ended(self) -> bool:
        return self._terminal is not None

    def completion(self) -> dict[str, Any] | None:
        """The response of the terminal event, or None when the stream had none."""
        if self._terminal is None:
            return None
        if self._terminal.get("output") is None:
            items = [self._done_items[i] for i in sorted(self._done_items)]
            return {**self._terminal, "output": items}
        return self._terminal


def replay_events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events that stream `response` (a completed one, as served), numbered from 0."""
    numbers = itertools.count()
    shell = {**response, "status": "in_progress", "output": [], "usage": None}
    if "completed_at" in shell:
        shell["completed_at"] = None
    for kind in (CREATED, "response.in_progress"):
        yield {"type": kind, "sequence_number": next(numbers), "response": shell}
    output = response.get("output")
    for index, item in enumerate(output if isinstance(output, list) else []):
        for event in _item_events(index, item):
            yield {**event, "sequence_number": next(numbers)}
    yield {"type": "response.completed", "sequence_number": next(numbers), "response": response}


def _item_events(index: int, item: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(item, dict):
        return
    kind = item.get("type")
    added = dict(item)
    if "status" in added:
        added["status"] = "in_progress"
    if kind == "message":
        added["content"] = []
    elif kind == "function_call":
        added["arguments"] = ""
    yield {"type": "response.output_item.added", "output_index": index, "item": added}
    if kind == "message":
        content = item.get("content")
        for part_index, part in enumerate(content if isinstance(content, list) else []):
            yield from _part_events(index, str(item.get("id", "")), part_index, part)
    elif kind == "function_call":
        arguments = str(item.get("arguments") or "")
        where = {"item_id": item.get("id"), "output_index": index}
        yield {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
        yield {"type": "response.function_call_arguments.done", **where, "arguments": arguments}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def _part_events(index: int, item_id: str, part_index: int, part: Any) -> Iterator[dict[str, Any]]:
    where = {"item_id": item_id, "output_index": index, "content_index": part_index}
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "output_text":
        text = str(part.get("text") or "")
        empty = {**part, "text": "", "logprobs": []} if "logprobs" in part else {**part, "text": ""}
        yield {"type": "response.content_part.added", **where, "part": empty}
        for piece in text_pieces(text):
            yield {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
        logprobs = part.get("logprobs") or []
        yield {"type": "response.output_text.done", **where, "text": text, "logprobs": logprobs}
    elif kind == "refusal":
        refusal = str(part.get("refusal") or "")
        yield {"type": "response.content_part.added", **where, "part": {**part, "refusal": ""}}
        yield {"type": "response.refusal.delta", **where, "delta": refusal}
        yield {"type": "response.refusal.done", **where, "refusal": refusal}
    else:
        yield {"type": "response.content_part.added", **where, "part": part}
    yield {"type": "response.content_part.done", **where, "part": part}


def replay_payload(response: dict[str, Any]) -> bytes:
    """The whole replayed stream, as bytes."""
    return b"".join(encode_typed_event(dumps(event), event) for event in replay_events(response))
