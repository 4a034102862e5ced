"""The overhead benchmark's baseline: a bare aiohttp server answering POSTs with fixed bytes.

    python -m bench.bare_server PORT FILE [HEADERS_FILE]

FILE holds the response body; HEADERS_FILE, when given, a JSON object of response headers sent
with it (the overhead bench passes the headers of a Deja hit, so both servers put the same bytes
on the wire and the difference is Deja's own work, not the size of its answer).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aiohttp import web


def main() -> None:
    port, body = int(sys.argv[1]), Path(sys.argv[2]).read_bytes()
    headers: dict[str, str] = json.loads(Path(sys.argv[3]).read_text()) if len(sys.argv) > 3 else {}
    headers.setdefault("Content-Type", "application/json")

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, headers=headers)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{tail:.*}", answer)
    app.router.add_get("/healthz", health)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
