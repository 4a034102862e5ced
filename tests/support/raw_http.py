"""An HTTP/1.1 request with exactly the headers given, for tests about headers.

aiohttp's client merges a header repeated in another spelling (`api-key` then `API-KEY`: the
second replaces the first), so a test that must send both writes the request itself.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from multidict import CIMultiDict


@dataclass
class RawReply:
    status: int
    headers: CIMultiDict[str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def raw_request(
    host: str,
    port: int,
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    payload: Any = None,
) -> RawReply:
    """Send one request (closing the connection after it) and read the whole answer."""
    body = json.dumps(payload).encode() if payload is not None else b""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    if payload is not None:
        lines.append("Content-Type: application/json")
    lines.append(f"Content-Length: {len(body)}")
    lines += [f"{name}: {value}" for name, value in headers]
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    reply_headers: CIMultiDict[str] = CIMultiDict()
    for line in header_lines:
        name, _, value = line.partition(":")
        reply_headers.add(name.strip(), value.strip())
    if reply_headers.get("Transfer-Encoding") == "chunked":
        rest = _unchunked(rest)
    return RawReply(int(status_line.split()[1]), reply_headers, rest)


def _unchunked(data: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += data[:size]
        data = data[size + 2 :]
