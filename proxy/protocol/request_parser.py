"""An OpenAI request body, from bytes or a dict to validated, typed values: one parser for live
requests (proxy/http/request_reader.py) and warm-up lines (proxy/answering/warmup.py), so a warmed
entry is keyed exactly as the live request it stands for.

Only what Deja itself relies on is checked (the fields that build keys and steer streaming);
the rest is the upstream's to judge, and reaches it unchanged. Every failure is an
InvalidRequest with a message that names the field, so clients get a useful 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import orjson

from core.errors import InvalidRequest
from normalize.keys.fingerprint import fingerprint
from normalize.keys.request import CacheRequest, Route
from normalize.keys.screen import PromptScreen
from proxy.protocol.directives import CacheDirectives, parse_directives

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    # Read-only from here on: the reader memoizes parsed requests, so nothing may mutate it.
    body: dict[str, Any]
    directives: CacheDirectives
    cache: CacheRequest
    # The prompt matches an injection pattern (normalize/keys/screen.py): never stored, never
    # matched loosely.
    suspicious: bool


class RequestParser:
    """A validated body and the headers that steer caching → the request's keys and controls."""

    def __init__(self, max_messages: int, screen: PromptScreen) -> None:
        self._max_messages = max_messages
        self._screen = screen

    def parse(
        self, route: Route, body: dict[str, Any], tenant: str, headers: Mapping[str, str]
    ) -> ParsedRequest:
        validate(route, body, self._max_messages)
        directives = parse_directives(headers)
        creq = fingerprint(route, body, tenant, directives.namespace)
        return ParsedRequest(body, directives, creq, self._screen.suspicious(body))


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body's JSON object; 400 for anything else, naming what is wrong with it."""
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
    """400 unless the fields Deja relies on are present and of the right type."""
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
    elif route is Route.RESPONSES:
        _validate_response_fields(body)
        _validate_input(body.get("input"), max_messages)
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


def _validate_response_fields(body: dict[str, Any]) -> None:
    for field in ("background", "store"):
        _check_type(body, field, bool)
    for field in ("instructions", "previous_response_id"):
        _check_type(body, field, str)


# The roles of a Responses API input message.
INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})


def _validate_input(value: Any, max_items: int) -> None:
    """A Responses API `input`: absent (a stored prompt or a conversation supplies it), a string,
    or a non-empty array of items. Only messages are looked into (they build keys); other items
    are the upstream's to judge."""
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list) or not value:
        raise InvalidRequest(
            "'input' must be a string or a non-empty array of items", param="input"
        )
    if len(value) > max_items:
        raise InvalidRequest(
            f"'input' has {len(value)} items; the limit is {max_items}", param="input"
        )
    for i, item in enumerate(value):
        path = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"'{path}' must be an object", param=path)
        if "role" not in item or item.get("type", "message") != "message":
            continue
        if not isinstance(item["role"], str) or item["role"] not in INPUT_ROLES:
            raise InvalidRequest(
                f"'{path}.role' must be one of {', '.join(sorted(INPUT_ROLES))}",
                param=f"{path}.role",
            )
        _validate_input_content(path, item.get("content"))


def _validate_input_content(path: str, content: Any) -> None:
    param = f"{path}.content"
    if isinstance(content, str):
        return
    if content is None:
        _missing(param, "a message needs 'content'")
    if not isinstance(content, list) or not content:
        raise InvalidRequest(
            f"'{param}' must be a string or a non-empty array of parts", param=param
        )
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest(f"'{param}' parts must be objects", param=f"{param}[{j}]")
        if part.get("type") in ("input_text", "output_text") and not isinstance(
            part.get("text"), str
        ):
            _missing(f"{param}[{j}].text", "a text part needs 'text', a string")


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
