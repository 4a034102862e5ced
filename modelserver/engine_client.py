"""The asyncio face of the engine: one async stream of outputs per request.

`EngineClient.generate` submits at once (so a request that cannot be served fails before any
response byte is written) and returns an `OutputStream`. The engine thread hands each output to
the event loop with `call_soon_threadsafe`; the stream ends after the output that carries a
finish reason. A consumer that stops early (the client disconnected and aiohttp cancelled the
handler, or a stop string ended the text) closes the stream, which aborts the request in the
engine; the engine frees its blocks before its next step. Consumers hold the stream in
`contextlib.aclosing` so that happens at once, whatever exception ends them.
"""

from __future__ import annotations

import asyncio

from modelserver.engine import Engine, EngineStats, GenerationOutput, GenerationRequest


class OutputStream:
    """The outputs of one request, in order."""

    def __init__(self, engine: Engine, request: GenerationRequest) -> None:
        self._engine = engine
        self._request_id = request.request_id
        self._outputs: asyncio.Queue[GenerationOutput] = asyncio.Queue()
        self._finished = False
        loop = asyncio.get_running_loop()

        def deliver(output: GenerationOutput) -> None:  # runs on the engine thread
            loop.call_soon_threadsafe(self._outputs.put_nowait, output)

        engine.submit(request, deliver)

    def __aiter__(self) -> OutputStream:
        return self

    async def __anext__(self) -> GenerationOutput:
        if self._finished:
            raise StopAsyncIteration
        output = await self._outputs.get()
        if output.error is not None:
            self._finished = True  # the engine has already dropped the request
            raise output.error
        self._finished = output.finish_reason is not None
        return output

    async def aclose(self) -> None:
        """Abort the request unless it already ended."""
        if not self._finished:
            self._finished = True
            self._engine.abort(self._request_id)


class EngineClient:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    def stats(self) -> EngineStats:
        return self._engine.stats()

    def generate(self, request: GenerationRequest) -> OutputStream:
        """Submit `request` (raising at once if it cannot be served) and stream its outputs."""
        return OutputStream(self._engine, request)
