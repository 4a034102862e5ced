"""Server-sent events: parse an upstream stream, rebuild the completion, replay a cached one.

OpenAI streams are `data: <json>\\n\\n` events ending with `data: [DONE]`. `SseParser` turns
bytes (cut anywhere, even inside a character) into event payloads; `CompletionAssembler` folds
chunk objects into the completion a non-streamed call would have returned; `replay_chunks` does
the reverse for a cached completion, so a hit can be streamed whichever way it was stored.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from typing import Any, Protocol

import orjson

from normalize.keys.request import Route

DONE = "[DONE]"
# A choice that ended for one of these reasons is complete.
CLEAN_FINISH = frozenset({"stop", "tool_calls"})
# A choice cut at max_tokens: stored too unless cache.store_truncated is off
# (proxy/answering/store_rule.py).
TRUNCATED_FINISH = "length"


_REPLAY_PIECE_CHARS = 64


def finished_cleanly(reasons: list[Any]) -> bool:
    """Whether an answer with these finish reasons (one per choice) is complete: there is at
    least one choice, and every one ended with stop or tool_calls (never length or
    content_filter). Whether it may be *stored* is proxy/answering/store_rule.py's (length may)."""
    return bool(reasons) and all(r in CLEAN_FINISH for r in reasons)


class SseParser:
    """Incremental parser for the `data:` payloads of an event stream (other fields ignored).

    It follows the WHATWG event-stream rules: the bytes are UTF-8 (a leading BOM skipped,
    invalid bytes replaced), lines end with CRLF, LF or a lone CR, a blank line ends an event.
    A network read may end anywhere: inside a character (the decoder keeps its first bytes
    until the rest come), between the CR and LF of one line end (`_after_cr`), or inside a
    line (kept as pieces, joined once when its end arrives). Each byte is scanned once, so a
    large read of many lines, or a long line in many reads, costs linear time.
    """

    def __init__(self) -> None:
        self._decoder = _utf8_decoder()
        self._partial: list[str] = []  # the current line's text so far (no line end yet)
        self._after_cr = False  # the last line ended with a CR that may be half of a CRLF
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """The payloads of the events that `chunk` completed."""
        return self._feed_text(self._decoder.decode(chunk))

    def flush(self) -> list[str]:
        """The end of the stream: payloads of an event it ended without a blank line after
        (its last line may lack a line end too; bytes of a cut character become U+FFFD)."""
        payloads = self._feed_text(self._decoder.decode(b"", final=True))
        self._decoder.reset()
        if self._partial:
            self._line("".join(self._partial), payloads)
            self._partial = []
        self._after_cr = False
        self._line("", payloads)
        return payloads

    def _feed_text(self, text: str) -> list[str]:
        payloads: list[str] = []
        if not text:  # an empty read, or only the first bytes of a character
            return payloads
        start = 0
        if self._after_cr:
            self._after_cr = False
            if text[0] == "\n":
                start = 1
        for match in _LINE_END.finditer(text, start):
            self._partial.append(text[start : match.start()])
            self._line("".join(self._partial), payloads)
            self._partial = []
            start = match.end()
        if start < len(text):
            self._partial.append(text[start:])
        # A CR at the very end ended its line already; an LF first in the next read is its
        # other half, not a line end of its own.
        self._after_cr = text.endswith("\r")
        return payloads

    def _line(self, line: str, payloads: list[str]) -> None:
        if not line:
            if self._data:
                payloads.append("\n".join(self._data))
                self._data = []
            return
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        # Comments (":...") and other fields (event:, id:, retry:) carry nothing we use.


# A CRLF is one line end, so it is tried before a lone CR.
_LINE_END = re.compile(r"\r\n|\r|\n")


def _utf8_decoder() -> codecs.IncrementalDecoder:
    # utf-8-sig skips one BOM at the start of the stream, as the event-stream rules say.
    return codecs.getincrementaldecoder("utf-8-sig")(errors="replace")


def encode_event(payload: str) -> bytes:
    return f"data: {payload}\n\n".encode()


class StreamAssembler(Protocol):
    """Folds a stream's JSON events into the answer a non-streamed call returns."""

    saw_done: bool  # a `[DONE]` line arrived
    error: Any  # an error event's error, if one came

    @property
    def ended(self) -> bool:
        """The stream reached what properly ends it."""
        ...

    def feed(self, chunk: dict[str, Any]) -> None: ...

    def completion(self) -> dict[str, Any] | None: ...


class CompletionAssembler:
    """Folds stream chunks into a completion object of the non-streamed shape."""

    def __init__(self, route: Route) -> None:
        self._route = route
        self._top: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self.saw_done = False
        self.error: Any = None

    def feed(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk and "choices" not in chunk:
            self.error = chunk["error"]
            return
        for key, value in chunk.items():
            if key == "choices":
                continue
            if key == "usage" and value is None:
                continue
            self._top[key] = value
        for choice in chunk.get("choices") or []:
            self._fold_choice(choice)

    def _fold_choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index", 0)
        if self._route is Route.CHAT:
            slot = self._choices.setdefault(
                index, {"index": index, "message": {}, "logprobs": None}
            )
            _fold_delta(slot["message"], choice.get("delta") or {})
        else:
            slot = self._choices.setdefault(index, {"index": index, "text": "", "logprobs": None})
            slot["text"] += choice.get("text") or ""
        if choice.get("logprobs"):
            slot["logprobs"] = _fold_logprobs(slot["logprobs"], choice["logprobs"])
        if choice.get("finish_reason") is not None:
            slot["finish_reason"] = choice["finish_reason"]
        for key, value in choice.items():
            if key not in ("index", "delta", "text", "logprobs", "finish_reason"):
                slot[key] = value

    @property
    def ended(self) -> bool:
        return self.saw_done

    @property
    def finish_reasons(self) -> list[str | None]:
        return [c.get("finish_reason") for c in self._choices.values()]

    def is_clean(self) -> bool:
        """A complete answer worth caching: terminal event, no error, every choice finished
        with stop or tool_calls (never length or content_filter)."""
        return self.saw_done and self.error is None and finished_cleanly(self.finish_reasons)

    def completion(self) -> dict[str, Any]:
        obj = dict(self._top)
        obj["object"] = "chat.completion" if self._route is Route.CHAT else "text_completion"
        choices = []
        for index in sorted(self._choices):
            choice = dict(self._choices[index])
            choice.setdefault("finish_reason", None)
            if self._route is Route.CHAT:
                message = choice["message"]
                message.setdefault("role", "assistant")
                message.setdefault("content", None)
            choices.append(choice)
        obj["choices"] = choices
        return obj


def _fold_delta(message: dict[str, Any], delta: dict[str, Any]) -> None:
    for key, value in delta.items():
        if key == "tool_calls":
            calls = message.setdefault("tool_calls", [])
            for call in value or []:
                _fold_tool_call(calls, call)
        elif isinstance(value, str) and key != "role" and isinstance(message.get(key), str):
            message[key] += value
        elif value is not None or key not in message:
            message[key] = value


def _fold_tool_call(calls: list[dict[str, Any]], delta: dict[str, Any]) -> None:
    index = delta.get("index", len(calls))
    while len(calls) <= index:
        calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    call = calls[index]
    if delta.get("id"):
        call["id"] = delta["id"]
    if delta.get("type"):
        call["type"] = delta["type"]
    function = delta.get("function") or {}
    if function.get("name"):
        call["function"]["name"] += function["name"]
    if function.get("arguments"):
        call["function"]["arguments"] += function["arguments"]


def _fold_logprobs(have: Any, new: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = dict(have or {})
    for key, value in new.items():
        if isinstance(value, list):
            merged[key] = list(merged.get(key) or []) + value
        elif key not in merged or merged[key] is None:
            merged[key] = value
    return merged


def replay_chunks(
    completion: dict[str, Any], route: Route, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """The chunk objects that stream `completion` (a cached, non-streamed shape)."""
    base: dict[str, Any] = {k: completion[k] for k in ("id", "created", "model") if k in completion}
    for key in ("system_fingerprint", "service_tier"):
        if completion.get(key) is not None:
            base[key] = completion[key]
    base["object"] = "chat.completion.chunk" if route is Route.CHAT else "text_completion"
    extra = {"usage": None} if include_usage else {}
    for choice in completion.get("choices", []):
        pieces = _chat_choice_deltas(choice) if route is Route.CHAT else _text_choice_deltas(choice)
        for piece in pieces:
            yield {**base, "choices": [piece], **extra}
    if include_usage:
        yield {**base, "choices": [], "usage": completion.get("usage")}


def _chat_choice_deltas(choice: dict[str, Any]) -> Iterator[dict[str, Any]]:
    index = choice.get("index", 0)
    message = choice.get("message") or {}
    # A tool-call answer has no content at all (null), not an empty one.
    first_content = "" if isinstance(message.get("content"), str) else None
    yield {
        "index": index,
        "delta": {"role": message.get("role", "assistant"), "content": first_content},
        "logprobs": None,
        "finish_reason": None,
    }
    content = message.get("content")
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("content") or []
    if isinstance(content, str) and content:
        if tokens and "".join(t.get("token", "") for t in tokens) == content:
            # One chunk per token, each with its own logprob, as a live stream would be.
            for token in tokens:
                yield {
                    "index": index,
                    "delta": {"content": token["token"]},
                    "logprobs": {"content": [token], "refusal": None},
                    "finish_reason": None,
                }
        else:
            for i, piece in enumerate(text_pieces(content)):
                lp = {"content": tokens, "refusal": None} if tokens and i == 0 else None
                yield {
                    "index": index,
                    "delta": {"content": piece},
                    "logprobs": lp,
                    "finish_reason": None,
                }
    for key, value in message.items():
        if key in ("role", "content", "tool_calls") or value is None:
            continue
        yield {"index": index, "delta": {key: value}, "logprobs": None, "finish_reason": None}
    for i, call in enumerate(message.get("tool_calls") or []):
        yield {
            "index": index,
            "delta": {"tool_calls": [{"index": i, **call}]},
            "logprobs": None,
            "finish_reason": None,
        }
    yield {
        "index": index,
        "delta": {},
        "logprobs": None,
        "finish_reason": choice.get("finish_reason"),
    }


def _text_choice_deltas(choice: dict[str, Any]) -> Iterator[dict[str, Any]]:
    index = choice.get("index", 0)
    text = choice.get("text") or ""
    pieces = list(text_pieces(text)) or [""]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        yield {
            "index": index,
            "text": piece,
            "logprobs": choice.get("logprobs") if i == 0 else None,
            "finish_reason": choice.get("finish_reason") if last else None,
        }


def text_pieces(text: str) -> Iterator[str]:
    """Cuts text into pieces of about _REPLAY_PIECE_CHARS at spaces; they concatenate back."""
    start = 0
    while start < len(text):
        end = min(len(text), start + _REPLAY_PIECE_CHARS)
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            if space > start:
                end = space
        yield text[start:end]
        start = end


def dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()
