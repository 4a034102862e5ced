"""Canonical text: the form of a prompt that the exact key hashes.

Two prompts with the same canonical text are the same question for every purpose, so the rules
are conservative: Unicode NFKC (full-width letters, ligatures), case folding, runs of whitespace
collapsed to one space and the ends trimmed. Punctuation is kept ("5.0" is not "50", "C++" is
not "C"). Inside fenced code blocks (```...```) whitespace and case carry meaning (Python's
indentation, identifiers), so a fence's content is only NFKC-normalized and its line endings
unified.
"""

from __future__ import annotations

import re
import unicodedata

_FENCE = re.compile(r"(```.*?(?:```|\Z))", re.DOTALL)
_WHITESPACE = re.compile(r"\s+")


def canonical_text(text: str) -> str:
    """The canonical form of `text` (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text)
    if "```" not in text:
        return _WHITESPACE.sub(" ", text.casefold()).strip()
    parts: list[str] = []
    for i, part in enumerate(_FENCE.split(text)):
        # split() with one capturing group alternates prose (even) and fences (odd).
        if i % 2:
            parts.append(part.replace("\r\n", "\n"))
        else:
            parts.append(_WHITESPACE.sub(" ", part.casefold()))
    return "".join(parts).strip()
