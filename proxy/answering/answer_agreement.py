"""A completion's answer, and whether two answers say the same thing.

Two answers agree when their normalized text is equal (canonical text; for tool calls, the
same names with the same parsed arguments), else when their embeddings' cosine reaches the
agreement level (`verify.answer_agreement`). The verifier compares a cached answer with a
fresh one this way; the semantic tier compares the answers of neighbouring entries (their
answer vectors, see `answer_vector`) to refuse hits where near-identical questions were
answered differently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

from core.errors import DejaError
from normalize.keys.text import canonical_text
from proxy.protocol.response_object import answer_of_response, is_response


class AnswerEmbedder(Protocol):
    async def embed(self, text: str, language: str = "en") -> np.ndarray:
        """The answer's embedding by the model of `language`, its prompt's language: answers
        are compared only with answers to prompts of the same language, by the same model."""
        ...


@dataclass(frozen=True, slots=True)
class Verdict:
    agreed: bool
    how: str  # "key", "embedding" or "tools"
    similarity: float | None = None


def answer_of(completion: dict[str, Any]) -> tuple[str, list[tuple[str, Any]]]:
    """(text, [(tool name, parsed arguments)]) of a completion's first choice, or of a
    Responses API response's output."""
    if is_response(completion):
        return answer_of_response(completion)
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    if "message" in choice:
        message = choice.get("message") or {}
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = orjson.loads(function.get("arguments") or "null")
            except orjson.JSONDecodeError:
                arguments = function.get("arguments")
            calls.append((str(function.get("name") or ""), arguments))
        return str(message.get("content") or ""), calls
    return str(choice.get("text") or ""), []


async def compare_answers(
    cached: dict[str, Any],
    fresh: dict[str, Any],
    embedder: AnswerEmbedder | None,
    agree: Callable[[float], bool],
    cached_vector: np.ndarray | None = None,
    language: str = "en",
) -> Verdict:
    """`agree` says whether two answer embeddings at a cosine say the same thing (one rule for
    the verifier and the semantic tier's answer check: `ThresholdController.answers_agree`);
    `cached_vector`, the cached answer's embedding where the semantic tier already holds it,
    saves embedding that answer again."""
    cached_text, cached_calls = answer_of(cached)
    fresh_text, fresh_calls = answer_of(fresh)
    if cached_calls or fresh_calls:
        return Verdict(cached_calls == fresh_calls, "tools")
    if canonical_text(cached_text) == canonical_text(fresh_text):
        return Verdict(True, "key")
    if embedder is None:
        return Verdict(False, "key")
    if cached_vector is None:
        a, b = await asyncio.gather(
            embedder.embed(cached_text, language), embedder.embed(fresh_text, language)
        )
    else:
        a, b = cached_vector, await embedder.embed(fresh_text, language)
    similarity = float(np.dot(a, b))
    return Verdict(agree(similarity), "embedding", similarity)


async def answer_vector(
    completion: dict[str, Any], embedder: AnswerEmbedder, language: str = "en"
) -> bytes | None:
    """The float32 embedding of a completion's answer text, or None when the answer is tool
    calls or empty (nothing to embed) or the embedding model is unavailable (the entry then
    simply has no answer vector, and neighbours are not compared with it)."""
    text, calls = answer_of(completion)
    if calls or not text.strip():
        return None
    try:
        vector = await embedder.embed(text, language)
    except DejaError:
        return None
    return np.asarray(vector, dtype=np.float32).tobytes()
