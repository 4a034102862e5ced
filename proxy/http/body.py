"""Reading an HTTP request's body within its size limit, whole or streamed (parsing it is
proxy/protocol's)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from core.errors import BodyTooLarge


async def read_body(request: web.Request, max_bytes: int) -> bytes:
    """The request's body bytes; 413 past `max_bytes`."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise BodyTooLarge(f"request body is {declared} bytes; the limit is {max_bytes}")
    if declared is not None:
        # Declared and within the limit: one read (the common case, and the fast one).
        return await request.read()
    raw = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        raw += chunk
        if len(raw) > max_bytes:
            raise BodyTooLarge(f"request body exceeds the limit of {max_bytes} bytes")
    return bytes(raw)


class StreamedBody:
    """A request's body as an async iterable of chunks, read as the upstream takes them, so a
    large upload (/v1/files, audio) passes through in bounded memory. Past `max_bytes` it stops
    with BodyTooLarge (and `too_large` says so: a transport that sees the body fail may report
    it as a broken connection)."""

    CHUNK_BYTES = 256 * 1024

    def __init__(self, request: web.Request, max_bytes: int) -> None:
        declared = request.content_length
        if declared is not None and declared > max_bytes:
            raise BodyTooLarge(f"request body is {declared} bytes; the limit is {max_bytes}")
        self._request = request
        self._max_bytes = max_bytes
        self.bytes_read = 0
        self.too_large = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._request.content.iter_chunked(self.CHUNK_BYTES):
            self.bytes_read += len(chunk)
            if self.bytes_read > self._max_bytes:
                self.too_large = True
                raise BodyTooLarge(f"request body exceeds the limit of {self._max_bytes} bytes")
            yield chunk

    def refusal(self) -> BodyTooLarge:
        return BodyTooLarge(f"request body exceeds the limit of {self._max_bytes} bytes")
