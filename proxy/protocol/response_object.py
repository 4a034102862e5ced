"""The Responses API's response object: what Deja reads from it and how a cached one is served.

A response (`"object": "response"`) holds `output`, a list of items: messages whose content parts
are `output_text` (or `refusal`), function calls, reasoning items and others. Its `status` says
whether it finished: only `completed` is a whole answer; `incomplete` (cut at
`max_output_tokens`, or filtered) and `failed` never are.

Identity: an upstream that stores a response (`store` not false) can continue from its id
(`previous_response_id`) and return it (`GET /v1/responses/{id}`). A hit for such a request
therefore carries the stored response's own id and `created_at`; any other hit gets a fresh id,
as an unstored response's id leads nowhere either.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

RESPONSE_OBJECT = "response"
COMPLETED = "completed"
ID_PREFIX = "resp_"


def is_response(obj: Any) -> bool:
    """A response object: it says so, or (an upstream that leaves `object` out) it has
    `output` and no chat `choices`."""
    if not isinstance(obj, dict):
        return False
    return obj.get("object") == RESPONSE_OBJECT or ("output" in obj and "choices" not in obj)


def status_of(response: dict[str, Any]) -> str | None:
    status = response.get("status")
    return status if isinstance(status, str) else None


def output_items(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    output = response.get("output")
    for item in output if isinstance(output, list) else []:
        if isinstance(item, dict):
            yield item


def answer_of_response(response: dict[str, Any]) -> tuple[str, list[tuple[str, Any]]]:
    """(the text of its messages, [(function name, parsed arguments)])."""
    texts: list[str] = []
    calls: list[tuple[str, Any]] = []
    for item in output_items(response):
        if item.get("type") == "message":
            texts.extend(str(part.get("text") or "") for part in _text_parts(item))
        elif item.get("type") == "function_call":
            raw = item.get("arguments") or "null"
            try:
                arguments = orjson.loads(raw)
            except orjson.JSONDecodeError:
                arguments = raw
            calls.append((str(item.get("name") or ""), arguments))
    return "".join(texts), calls


def token_logprobs(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-token logprobs of its text (present when the request included them)."""
    tokens: list[dict[str, Any]] = []
    for item in output_items(response):
        if item.get("type") == "message":
            for part in _text_parts(item):
                tokens.extend(t for t in part.get("logprobs") or [] if isinstance(t, dict))
    return tokens


def usage_tokens(response: dict[str, Any]) -> tuple[int, int]:
    """(input tokens, output tokens) of its usage; 0 where absent."""
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    return _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))


def served_response(
    stored: dict[str, Any], fresh_id: str, created_at: int, upstream_keeps: bool
) -> dict[str, Any]:
    """A cached response as a hit serves it: its own id where the upstream keeps it (the request
    did not say `store: false`, and the upstream did not answer that it kept nothing), else
    `fresh_id` and `created_at`."""
    kept = upstream_keeps and stored.get("store") is not False
    if kept and isinstance(stored.get("id"), str) and stored["id"]:
        return stored
    return {**stored, "id": fresh_id, "created_at": created_at}


def fallback_response(model: str, text: str, created_at: int) -> dict[str, Any]:
    """A completed response saying `text` (the degraded answer's fallback template)."""
    return {
        "object": RESPONSE_OBJECT,
        "created_at": created_at,
        "status": COMPLETED,
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [
            {
                "type": "message",
                "id": "msg_fallback",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
    }


def _text_parts(item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    content = item.get("content")
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "output_text":
            yield part


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
