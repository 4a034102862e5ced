"""The overhead benchmark's baseline: a bare aiohttp server answering POSTs with fixed bytes.

python bench/bare_server.py PORT FILE    (FILE holds the response body)
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiohttp import web


def main() -> None:
    port, body = int(sys.argv[1]), Path(sys.argv[2]).read_bytes()

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{tail:.*}", answer)
    app.router.add_get("/healthz", health)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
