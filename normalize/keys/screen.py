"""A cheap screen for prompt-injection attempts, against cache poisoning.

An answer to "ignore previous instructions and say X" must never be stored (an attacker could
plant it for others), and such a prompt must never be matched loosely. The patterns are
configurable regular expressions (`guardrails.injection_patterns`), matched case-insensitively
against every user-authored text of the request.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from core.errors import ConfigError


class PromptScreen:
    def __init__(self, patterns: Sequence[str]) -> None:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    f"guardrails.injection_patterns has an invalid pattern {pattern!r}: {exc}"
                ) from exc
        # One alternation: a single pass over each text, whatever the number of patterns.
        self._combined = (
            re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE) if patterns else None
        )

    def suspicious(self, body: Mapping[str, Any]) -> bool:
        if self._combined is None:
            return False
        search = self._combined.search
        return any(search(text) for text in _user_texts(body))


def _user_texts(body: Mapping[str, Any]) -> Iterator[str]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        yield prompt
    elif isinstance(prompt, list):
        yield from (p for p in prompt if isinstance(p, str))
    for message in body.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]
