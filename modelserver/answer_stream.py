"""An engine request's outputs read as text: deltas as they come, the finish reason, usage.

Shared by the routes that generate (chat, completions, responses), which differ only in how
they write what is read here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from modelserver.completion_response import Usage
from modelserver.engine_client import OutputStream
from modelserver.text_output import TextAssembler, TokenText


class AnswerStream:
    """Engine outputs → text deltas, ending at the engine's finish or at a stop string."""

    def __init__(
        self, stream: OutputStream, assembler: TextAssembler, num_prompt_tokens: int
    ) -> None:
        self._stream = stream
        self._assembler = assembler
        self._num_prompt_tokens = num_prompt_tokens
        self._num_cached_tokens = 0
        self.finish_reason: str | None = None

    async def deltas(self) -> AsyncGenerator[tuple[str, list[TokenText]], None]:
        """(new text, tokens whose text is now all sent) per engine output; `finish_reason` is
        set when the last one is yielded. Closing this early aborts the engine request."""
        async with contextlib.aclosing(self._stream):
            async for output in self._stream:
                self._num_cached_tokens = output.num_cached_tokens
                assert output.token is not None, "only error outputs lack a token"
                delta = self._assembler.push(output.token)
                text, tokens = delta.text, list(delta.tokens)
                if self._assembler.stopped_by_string:
                    self.finish_reason = (
                        "stop"  # the engine may run on: the stream's close aborts it
                    )
                elif output.finish_reason is not None:
                    self.finish_reason = output.finish_reason.value
                if self.finish_reason is not None:
                    tail = self._assembler.flush()
                    text, tokens = text + tail.text, tokens + list(tail.tokens)
                yield text, tokens
                if self.finish_reason is not None:
                    return

    @property
    def text(self) -> str:
        """The whole answer so far (all of it once `deltas` ended)."""
        return self._assembler.text

    def usage(self) -> Usage:
        return Usage(self._num_prompt_tokens, self._assembler.num_tokens, self._num_cached_tokens)
