"""OpenAI response objects: `chat.completion`, `chat.completion.chunk` and `text_completion`.

The proxy in front parses these (and caches them), so they follow the wire format closely: ids
`chatcmpl-…`/`cmpl-…`, `finish_reason` "stop" or "length", `usage` with
`prompt_tokens_details.cached_tokens` (the tokens served from the prefix cache), chat logprobs as
`{"content": [{token, logprob, bytes, top_logprobs}]}` and completion logprobs in the legacy
`{tokens, token_logprobs, top_logprobs, text_offset}` shape.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from modelserver.text_output import TokenText
from modelserver.tokenizer import TextTokenizer

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    def to_json(self) -> JSON:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


class ResponseBuilder:
    """Builds every object of one response (one id, one `created`)."""

    def __init__(
        self, *, chat: bool, model: str, created: int, tokenizer: TextTokenizer, include_usage: bool
    ) -> None:
        self._chat = chat
        self._model = model
        self._created = created
        self._tokenizer = tokenizer
        self._include_usage = include_usage
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"

    def completion(
        self,
        text: str,
        finish_reason: str,
        tokens: Sequence[TokenText] | None,
        usage: Usage,
    ) -> JSON:
        """The whole answer (non-streaming)."""
        choice: JSON = {"index": 0, "finish_reason": finish_reason}
        choice["logprobs"] = self._logprobs(tokens) if tokens is not None else None
        if self._chat:
            choice["message"] = {"role": "assistant", "content": text, "refusal": None}
        else:
            choice["text"] = text
        return self._envelope("chat.completion" if self._chat else "text_completion", [choice]) | {
            "usage": usage.to_json()
        }

    def first_chunk(self) -> JSON | None:
        """Chat streams open with the assistant role; completion streams have no such chunk."""
        if not self._chat:
            return None
        return self._chunk({"role": "assistant", "content": ""}, None, None)

    def delta_chunk(
        self, text: str, tokens: Sequence[TokenText] | None, finish_reason: str | None
    ) -> JSON:
        delta: JSON = {"content": text} if text or finish_reason is None else {}
        return self._chunk(delta, tokens, finish_reason)

    def usage_chunk(self, usage: Usage) -> JSON:
        """The last chunk when `stream_options.include_usage`: no choices, only usage."""
        kind = "chat.completion.chunk" if self._chat else "text_completion"
        return self._envelope(kind, []) | {"usage": usage.to_json()}

    def _chunk(
        self, delta: JSON, tokens: Sequence[TokenText] | None, finish_reason: str | None
    ) -> JSON:
        choice: JSON = {"index": 0, "finish_reason": finish_reason}
        choice["logprobs"] = self._logprobs(tokens) if tokens is not None else None
        if self._chat:
            choice["delta"] = delta
            kind = "chat.completion.chunk"
        else:
            choice["text"] = delta.get("content", "")
            kind = "text_completion"
        chunk = self._envelope(kind, [choice])
        if self._include_usage:
            chunk["usage"] = None  # as OpenAI: every chunk but the last carries usage: null
        return chunk

    def _envelope(self, kind: str, choices: list[JSON]) -> JSON:
        return {
            "id": self.id,
            "object": kind,
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }

    def _logprobs(self, tokens: Sequence[TokenText]) -> JSON:
        return self._chat_logprobs(tokens) if self._chat else self._text_logprobs(tokens)

    def _chat_logprobs(self, tokens: Sequence[TokenText]) -> JSON:
        def entry(token_id: int, logprob: float) -> JSON:
            return {
                "token": self._tokenizer.token_text(token_id),
                "logprob": logprob,
                "bytes": list(self._tokenizer.token_bytes(token_id)),
            }

        content = []
        for item in tokens:
            sampled = item.token
            assert sampled.logprob is not None, "logprobs were requested from the engine"
            content.append(
                entry(sampled.token_id, sampled.logprob)
                | {"top_logprobs": [entry(t, lp) for t, lp in sampled.top_logprobs]}
            )
        return {"content": content, "refusal": None}

    def _text_logprobs(self, tokens: Sequence[TokenText]) -> JSON:
        text_of = self._tokenizer.token_text
        return {
            "tokens": [text_of(t.token.token_id) for t in tokens],
            "token_logprobs": [t.token.logprob for t in tokens],
            "top_logprobs": [
                {text_of(token_id): lp for token_id, lp in t.token.top_logprobs} for t in tokens
            ],
            "text_offset": [t.text_offset for t in tokens],
        }
