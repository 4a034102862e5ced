"""Plain blocking HTTP calls to a server process, for the integration tests that run `deja serve`
as a real process (the test thread waits; nothing to share an event loop with)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.processes import ServerProcess


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> Any:
        """The JSON body, or the text when it is not JSON."""
        try:
            return json.loads(self.raw)
        except ValueError:
            return self.raw.decode()


def http(
    server: ServerProcess,
    method: str,
    path: str,
    payload: Any = None,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
) -> Reply:
    raw = (
        data
        if data is not None
        else (json.dumps(payload).encode() if payload is not None else None)
    )
    request = urllib.request.Request(
        server.url + path,
        data=raw,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return Reply(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as exc:
        with exc:  # the error holds the response's socket
            return Reply(exc.code, dict(exc.headers), exc.read())


def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> float:
    """Seconds until `check()` held (fails after timeout_s)."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout_s, "the condition was not reached in time"
        time.sleep(0.05)
    return time.monotonic() - start
