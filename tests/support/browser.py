"""A headless Chromium driven over its DevTools protocol (CDP), with aiohttp's websocket client.

Just enough of CDP for the dashboard's tests: start the browser, open one page, call methods
and evaluate JavaScript in it (awaiting promises, values returned as JSON), collect what the page
reported as errors (exceptions, console errors, Content-Security-Policy violations), take a
screenshot. Debian's `chromium` package; `CHROMIUM` is None where it is not installed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class PageError(AssertionError):
    pass


class BrowserPage:
    """One tab's CDP session."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket = socket
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.errors: list[str] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = answer
        await self._socket.send_json({"id": call_id, "method": method, "params": params})
        reply = await asyncio.wait_for(answer, 10.0)
        if "error" in reply:
            raise PageError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise PageError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 10.0) -> Any:
        """Evaluate `expression` until it is truthy; returns its value."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise PageError(f"never true within {timeout_s} s: {expression}")
            await asyncio.sleep(0.1)

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'")

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        _write(path, base64.b64decode(shot["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self._socket.close()

    async def _read(self) -> None:
        async for message in self._socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = message.json()
            if "id" in data:
                answer = self._waiting.pop(data["id"], None)
                if answer is not None and not answer.done():
                    answer.set_result(data)
            else:
                self._note(data)

    def _note(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(str(params["exceptionDetails"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.errors.append(f"{entry['text']} ({entry.get('url', '')})")
        elif method == "Runtime.consoleAPICalled" and params["type"] == "error":
            self.errors.append(str(params["args"]))


@contextlib.asynccontextmanager
async def headless_page(
    profile: Path, width: int = 1400, height: int = 1000
) -> AsyncIterator[BrowserPage]:
    """A fresh Chromium (its own profile folder), one blank page, closed on the way out."""
    assert CHROMIUM is not None, "chromium is not installed"
    process = await asyncio.create_subprocess_exec(
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",  # tests run as root in CI containers
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        port = await _devtools_port(profile / "DevToolsActivePort", process)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            target = next(t for t in targets if t["type"] == "page")
            socket = await session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
            page = BrowserPage(socket)
            try:
                for domain in ("Page", "Runtime", "Log"):
                    await page.call(f"{domain}.enable")
                yield page
            finally:
                await page.close()
    finally:
        if process.returncode is None:
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10.0)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _devtools_port(path: Path, process: asyncio.subprocess.Process) -> int:
    """Chromium writes the port it chose into its profile folder once it listens."""
    for _ in range(300):
        port = _port_in(path)
        if port is not None:
            return port
        if process.returncode is not None:
            raise PageError(f"chromium exited with {process.returncode} before listening")
        await asyncio.sleep(0.05)
    raise PageError("chromium did not open its DevTools port within 15 s")


def _port_in(path: Path) -> int | None:
    lines = path.read_text().splitlines() if path.exists() else []
    return int(lines[0]) if lines and lines[0].isdigit() else None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
