"""What the answering layer reads from a Responses API response: its answer (verification and
the answer check compare it), its usage (tokens saved) and its logprobs (TTL)."""

from __future__ import annotations

import math
from typing import Any

from proxy.answering.answer_agreement import answer_of, compare_answers
from proxy.protocol.response_object import token_logprobs, usage_tokens


def response(*items: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "response",
        "status": "completed",
        "output": list(items),
        "usage": {"input_tokens": 11, "output_tokens": 4, "total_tokens": 15},
    }


def message(*texts: str, logprob: float | None = None) -> dict[str, Any]:
    parts = [
        {
            "type": "output_text",
            "text": text,
            "annotations": [],
            **(
                {"logprobs": [{"token": text, "logprob": logprob, "top_logprobs": []}]}
                if logprob is not None
                else {}
            ),
        }
        for text in texts
    ]
    return {"type": "message", "id": "msg_1", "role": "assistant", "content": parts}


CALL = {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_the_answer_is_the_text_of_every_message_and_the_calls() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    assert answer_of(response(reasoning, message("Paris ", "is the capital."))) == (
        "Paris is the capital.",
        [],
    )
    assert answer_of(response(CALL)) == ("", [("get_weather", {"city": "Paris"})])


async def test_two_responses_agree_by_text_and_by_calls() -> None:
    def never(cosine: float) -> bool:
        return False

    same = await compare_answers(
        response(message("Paris.")), response(message(" paris.")), None, never
    )
    other = await compare_answers(
        response(message("Paris.")), response(message("Rome.")), None, never
    )
    calls = await compare_answers(response(CALL), response(CALL), None, never)
    assert (same.agreed, same.how) == (True, "key")
    assert other.agreed is False
    assert (calls.agreed, calls.how) == (True, "tools")


def test_usage_and_logprobs() -> None:
    answer = response(message("Paris.", logprob=math.log(0.9)))
    assert usage_tokens(answer) == (11, 4)
    assert usage_tokens({"output": []}) == (0, 0)
    assert [t["token"] for t in token_logprobs(answer)] == ["Paris."]
    assert token_logprobs(response(message("Paris."))) == []
