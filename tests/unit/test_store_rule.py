"""The one rule on which finished answers are stored, by how their choices ended."""

from __future__ import annotations

from typing import Any

import pytest

from normalize.keys.request import Route
from proxy.answering.store_rule import StoreRule


def completion(*reasons: Any) -> dict[str, Any]:
    return {"choices": [{"index": i, "finish_reason": r} for i, r in enumerate(reasons)]}


@pytest.mark.parametrize(
    ("answer", "by_default", "without_truncated"),
    [
        (completion("stop"), None, None),
        (completion("tool_calls"), None, None),
        (completion("length"), None, "length"),
        (completion("stop", "length"), None, "length"),
        (completion("content_filter"), "content_filter", "content_filter"),
        (completion("length", "content_filter"), "content_filter", "length"),
        (completion("stop", None), "unfinished", "unfinished"),
        (completion("function_call_soon"), "function_call_soon", "function_call_soon"),
        (completion(), "no_choices", "no_choices"),
        ({"object": "chat.completion"}, "no_choices", "no_choices"),
        ({"choices": ["not a choice"]}, "unfinished", "unfinished"),
        ("not a completion", "no_choices", "no_choices"),
    ],
)
def test_what_is_stored_and_why_not(
    answer: Any, by_default: str | None, without_truncated: str | None
) -> None:
    assert StoreRule().refusal(answer, Route.CHAT) == by_default
    assert StoreRule(store_truncated=True).refusal(answer, Route.CHAT) == by_default
    assert StoreRule(store_truncated=False).refusal(answer, Route.CHAT) == without_truncated


@pytest.mark.parametrize(
    ("response", "refusal"),
    [
        ({"object": "response", "status": "completed", "output": []}, None),
        ({"object": "response", "status": "incomplete"}, "incomplete"),
        ({"object": "response", "status": "failed"}, "error"),
        ({"object": "response", "status": "in_progress"}, "unfinished"),
        ({"object": "response"}, "unfinished"),
        (completion("stop"), "no_choices"),
    ],
)
def test_a_response_is_stored_only_when_completed(response: Any, refusal: str | None) -> None:
    # Never an incomplete one, not even with store_truncated on.
    assert StoreRule(store_truncated=True).refusal(response, Route.RESPONSES) == refusal


def test_a_response_without_its_object_field_is_still_a_response() -> None:
    response = {"id": "resp_1", "status": "completed", "output": []}
    assert StoreRule().refusal(response, Route.RESPONSES) is None
