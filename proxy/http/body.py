"""Reading and validating OpenAI request bodies.

Only what Deja itself relies on is checked (the fields that build keys and steer streaming);
the rest is the upstream's to judge, and reaches it unchanged. Every failure is an
InvalidRequest with a message that names the field, so clients get a useful 400.
"""

from __future__ import annotations

from typing import Any, NoReturn

import orjson
from aiohttp import web

from core.errors import BodyTooLarge, InvalidRequest
from normalize.keys.request import Route

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


async def read_json_body(request: web.Request, max_bytes: int) -> dict[str, Any]:
    """The request's JSON object; 413 past `max_bytes`, 400 for anything but a JSON object."""
    return parse_json_object(await read_body(request, max_bytes))


async def read_body(request: web.Request, max_bytes: int) -> bytes:
    """The request's body bytes; 413 past `max_bytes`."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise BodyTooLarge(f"request body is {declared} bytes; the limit is {max_bytes}")
    if declared is not None:
        # Declared and within the limit: one read (the common case, and the fast one).
        return await request.read()
    raw = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        raw += chunk
        if len(raw) > max_bytes:
            raise BodyTooLarge(f"request body exceeds the limit of {max_bytes} bytes")
    return bytes(raw)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise InvalidRequest("request body is empty; expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as utf8:
            raise InvalidRequest(f"request body is not valid UTF-8 (byte {utf8.start})") from None
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def validate(route: Route, body: dict[str, Any], max_messages: int) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest(
            "'model' is required and must be a non-empty string",
            code="missing_model",
            param="model",
        )
    _check_type(body, "stream", bool)
    _check_type(body, "stream_options", dict)
    _check_type(body, "n", int)
    if isinstance(body.get("n"), int) and not 1 <= body["n"] <= 128:
        raise InvalidRequest("'n' must be between 1 and 128", param="n")
    if route is Route.CHAT:
        _validate_messages(body.get("messages"), max_messages)
        _check_type(body, "logprobs", bool)
        _check_type(body, "top_logprobs", int)
    else:
        _validate_prompt(body.get("prompt"))
        _check_type(body, "logprobs", int)


def _check_type(body: dict[str, Any], field: str, kind: type, path: str | None = None) -> None:
    """`body[field]` is absent, null or of `kind`; `path` names it in the error (default: the
    field itself)."""
    value = body.get(field)
    if value is None:
        return
    # bool is an int in Python; an int field must not accept true/false.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        param = path or field
        raise InvalidRequest(
            f"'{param}' must be {_kind_name(kind)}, got {type(value).__name__}", param=param
        )


def _kind_name(kind: type) -> str:
    return {bool: "a boolean", int: "an integer", dict: "an object", str: "a string"}.get(
        kind, kind.__name__
    )


def _validate_messages(messages: Any, max_messages: int) -> None:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(
            "'messages' is required and must be a non-empty array",
            code="missing_messages",
            param="messages",
        )
    if len(messages) > max_messages:
        raise InvalidRequest(
            f"'messages' has {len(messages)} items; the limit is {max_messages}",
            param="messages",
        )
    for i, message in enumerate(messages):
        _validate_message(f"messages[{i}]", message)


def _validate_message(path: str, message: Any) -> None:
    if not isinstance(message, dict):
        raise InvalidRequest(f"'{path}' must be an object", param=path)
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:  # a list or object is unhashable
        raise InvalidRequest(
            f"'{path}.role' must be one of {', '.join(sorted(ROLES))}", param=f"{path}.role"
        )
    _validate_content(path, message.get("content"))
    _check_type(message, "name", str, f"{path}.name")
    # The fields each role cannot do without, as OpenAI's API reference defines them. A turn
    # missing one would be answered by a lenient upstream and stored under a key no valid
    # request produces; OpenAI itself refuses it.
    if role in _NEEDS_CONTENT and message.get("content") is None:
        _missing(f"{path}.content", f"a {role} message needs 'content'")
    if role == "assistant":
        calls = message.get("tool_calls")
        if calls is not None and (not isinstance(calls, list) or not calls):
            raise InvalidRequest(
                f"'{path}.tool_calls' must be a non-empty array", param=f"{path}.tool_calls"
            )
        if calls is not None and not all(isinstance(call, dict) for call in calls):
            raise InvalidRequest(
                f"'{path}.tool_calls' items must be objects", param=f"{path}.tool_calls"
            )
        if message.get("content") is None and calls is None and not message.get("function_call"):
            _missing(f"{path}.content", "an assistant message needs 'content' or 'tool_calls'")
    elif role == "tool":
        _require_string(message, "tool_call_id", path, "a tool message needs 'tool_call_id'")
    elif role == "function":
        _require_string(message, "name", path, "a function message needs 'name'")


# Roles whose turn is nothing without its content (tool results included).
_NEEDS_CONTENT = frozenset({"system", "developer", "user", "tool"})


def _validate_content(path: str, content: Any) -> None:
    param = f"{path}.content"
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidRequest(f"'{param}' must be a string, an array of parts or null", param=param)
    if not content:
        raise InvalidRequest(f"'{param}' must not be an empty array", param=param)
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest(f"'{param}' parts must be objects", param=f"{param}[{j}]")
        # Only the text part is Deja's business (it builds keys); other part types, vLLM's
        # own among them, are the upstream's to judge.
        if part.get("type") == "text" and not isinstance(part.get("text"), str):
            _missing(f"{param}[{j}].text", "a text part needs 'text', a string")


def _require_string(message: dict[str, Any], field: str, path: str, why: str) -> None:
    value = message.get(field)
    if not isinstance(value, str) or not value:
        _missing(f"{path}.{field}", f"{why} (a non-empty string)")


def _missing(param: str, why: str) -> NoReturn:
    raise InvalidRequest(
        f"missing required parameter '{param}': {why}",
        code="missing_required_parameter",
        param=param,
    )


def _validate_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return
    raise InvalidRequest(
        "'prompt' is required: a string, an array of strings, or token arrays",
        code="missing_prompt",
        param="prompt",
    )
