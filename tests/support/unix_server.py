"""An aiohttp app served on a unix socket: what stands for edge mode's worker in unit tests."""

from __future__ import annotations

from aiohttp import web


class UnixServer:
    def __init__(self, app: web.Application, socket_path: str) -> None:
        self._runner = web.AppRunner(app)
        self._socket_path = socket_path

    async def start(self) -> None:
        await self._runner.setup()
        await web.UnixSite(self._runner, self._socket_path).start()

    async def close(self) -> None:
        await self._runner.cleanup()
