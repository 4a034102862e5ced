"""tests/unit is socket-free: a test here that connects or binds a socket fails.

Unit tests fake the network at its seams (tests/support/fake_upstream.py stands for the model
server); a test that needs a server, a port or a real Redis belongs in tests/e2e (the app over
HTTP) or tests/integration (real Redis, real processes, real sockets between parts).

The guard is an audit hook (PEP 578): CPython raises `socket.connect` and `socket.bind` audit
events for every socket, whichever library opens it, so nothing is patched. The hook stays
installed for the session (hooks cannot be removed) but acts only while a test of this folder
runs. `socket.socketpair()` raises neither event, so the event loop's own wake-up pair and a
test's in-process socket pair stay allowed. Code that swallows the refusal does not hide it:
every attempt is also recorded, and the test fails at teardown.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

_GUARDED_EVENTS = frozenset({"socket.connect", "socket.bind"})


class SocketInUnitTest(RuntimeError):
    """A unit test reached for the network."""


class SocketGuard:
    def __init__(self) -> None:
        self.armed = False
        self.attempts: list[str] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed or event not in _GUARDED_EVENTS:
            return
        attempt = f"{event} to {args[1]!r}"
        self.attempts.append(attempt)
        raise SocketInUnitTest(
            f"{attempt} in a unit test: fake it at its seam, or move the test to tests/e2e "
            "or tests/integration (see tests/unit/conftest.py)"
        )


@pytest.fixture(scope="session")
def socket_guard() -> SocketGuard:
    guard = SocketGuard()
    sys.addaudithook(guard)
    return guard


@pytest.fixture(autouse=True)
def no_sockets(socket_guard: SocketGuard) -> Iterator[None]:
    socket_guard.attempts.clear()
    socket_guard.armed = True
    try:
        yield
    finally:
        socket_guard.armed = False
    assert not socket_guard.attempts, f"sockets opened in a unit test: {socket_guard.attempts}"
