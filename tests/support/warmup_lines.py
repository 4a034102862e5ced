"""Lines of a `POST /admin/v1/warmup` body, for tests."""

from __future__ import annotations

import json


def warm_up_line(question: str, answer: str, api_key: str) -> bytes:
    """One JSONL line: a one-turn chat request and its finished answer, for `api_key`'s tenant."""
    return json.dumps(
        {
            "request": {"model": "m", "messages": [{"role": "user", "content": question}]},
            "response": {
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
            },
            "api_key": api_key,
        }
    ).encode()
