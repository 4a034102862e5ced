"""The `input` of a Responses API request, split for keying: the context that must match exactly,
and the last user message's text, the one part matched by meaning.

`input` is a string (one user message) or a list of items. Only a list that ends with a user
message made of text (a string, or `input_text` parts) has a turn to match loosely; anything else
(images, files, function-call outputs, reasoning items, an assistant turn last) is keyed whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The content part that carries a user's text in the Responses API.
INPUT_TEXT = "input_text"


@dataclass(frozen=True, slots=True)
class InputSplit:
    """`context`: the items before the last user message; `turn`: that message's other fields
    (and whether its content was a string or parts); `text`: its text."""

    context: list[Any]
    turn: dict[str, Any]
    text: str


def split_input(value: Any) -> InputSplit | None:
    """The split of a request's `input`, or None when the whole input must be keyed exactly."""
    if isinstance(value, str):
        return InputSplit([], {"content_form": "input_string"}, value)
    if not isinstance(value, list) or not value:
        return None
    last = value[-1]
    if not isinstance(last, Mapping) or not _is_user_message(last):
        return None
    text = _message_text(last.get("content"))
    if text is None:
        return None
    turn = {k: v for k, v in last.items() if k != "content"}
    turn["content_form"] = type(last["content"]).__name__
    return InputSplit(list(value[:-1]), turn, text)


def _is_user_message(item: Mapping[str, Any]) -> bool:
    # An easy input message has no "type"; the typed form says "message".
    return item.get("role") == "user" and item.get("type", "message") == "message"


def _message_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence) or not content:
        return None
    texts: list[str] = []
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") != INPUT_TEXT:
            return None
        text = part.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return "\n".join(texts)
