"""Waiting in async tests for something the proxy does in the background (storing an answer)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_until(predicate: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Return once `predicate()` is true; fail the test after `timeout_s`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)
