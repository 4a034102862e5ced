"""Reading an HTTP request's body within its size limit (parsing it is proxy/protocol's)."""

from __future__ import annotations

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
