"""From generated token ids to the text a client sees: detokenizing, stop strings, hold-back.

Byte-level BPE tokens need not end on a character boundary, so text is decoded incrementally
over a short window of recent tokens and released only once it no longer ends in U+FFFD (vLLM's
prefix/read offsets). Stop strings are OpenAI's: the text ends just before the first one found,
and while streaming the last `len(longest stop) - 1` characters are held back, because they
could still turn out to begin a stop string.

The engine knows nothing of text; this runs on the HTTP side, one `TextAssembler` per response.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from modelserver.sampler import SampledToken
from modelserver.tokenizer import TextTokenizer


@dataclass(frozen=True, slots=True)
class TokenText:
    """A generated token and where its text starts in the completion text."""

    token: SampledToken
    text_offset: int
    text: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    """What can be sent now: new text, and the tokens whose text is now all sent."""

    text: str
    tokens: tuple[TokenText, ...]


class TextAssembler:
    def __init__(
        self, tokenizer: TextTokenizer, stop: Sequence[str], stop_token_ids: frozenset[int]
    ) -> None:
        self._tokenizer = tokenizer
        self._stop = tuple(stop)
        self._holdback = max((len(s) for s in self._stop), default=1) - 1
        self._stop_token_ids = stop_token_ids
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self._text = ""
        self._sent = 0
        self._pending: list[TokenText] = []
        self.num_tokens = 0
        """Tokens generated up to the end of the output (stop token included; tokens after a
        stop string excluded): the `completion_tokens` of usage."""
        self.stopped_by_string = False

    @property
    def text(self) -> str:
        return self._text

    def push(self, token: SampledToken) -> TextDelta:
        """Add a generated token; returns what became safe to send."""
        if self.stopped_by_string:
            return TextDelta("", ())
        self.num_tokens += 1
        if token.token_id in self._stop_token_ids:
            return TextDelta("", ())
        start = len(self._text)
        self._text += self._decode_next(token.token_id)
        self._pending.append(TokenText(token, start, self._text[start:]))
        self._cut_at_stop_string(search_from=max(0, start - self._holdback))
        if self.stopped_by_string:
            return self._release(len(self._text))
        return self._release(len(self._text) - self._holdback)

    def flush(self) -> TextDelta:
        """The sequence ended: release everything held back."""
        return self._release(len(self._text))

    def _decode_next(self, token_id: int) -> str:
        self._ids.append(token_id)
        before = self._tokenizer.decode(self._ids[self._prefix_offset : self._read_offset])
        after = self._tokenizer.decode(self._ids[self._prefix_offset :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""  # an incomplete character: wait for the next token
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return after[len(before) :]

    def _cut_at_stop_string(self, *, search_from: int) -> None:
        found = [i for i in (self._text.find(s, search_from) for s in self._stop) if i >= 0]
        if not found:
            return
        end = min(found)
        self._text = self._text[:end]
        self.stopped_by_string = True
        # Tokens that start inside the kept text stay (the last one cut short); the ones that
        # start at the stop string or after it are part of it.
        self._pending = [
            TokenText(t.token, t.text_offset, t.text[: end - t.text_offset])
            for t in self._pending
            if t.text_offset < end
        ]

    def _release(self, limit: int) -> TextDelta:
        limit = max(limit, self._sent)
        text = self._text[self._sent : limit]
        self._sent = limit
        ready = [t for t in self._pending if t.text_offset + len(t.text) <= limit]
        self._pending = self._pending[len(ready) :]
        return TextDelta(text, tuple(ready))
