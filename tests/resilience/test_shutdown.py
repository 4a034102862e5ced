"""Graceful shutdown of a real `deja serve` process: SIGTERM while a slow answer streams.

The listening socket closes at once (new connections are refused), the stream in progress
runs to its end (bounded by `server.shutdown_grace_s`), and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import pytest

from tests.resilience.client import CHAT, Reply, chat
from tests.support import processes
from tests.support.processes import ServerProcess
from tests.support.stub_process import StubProcess

WORDS = " ".join(f"word{i}" for i in range(12))  # 13 chunks, 0.25 s apart: about 3 s
# From the last request's end to the process's exit: closing up, then the interpreter's own
# teardown (about 1.5 s here once spaCy and torch are imported).
EXIT_S = 4.0


@pytest.fixture
def upstream() -> Iterator[StubProcess]:
    stub = StubProcess(answer=WORDS, chunk_delay_s=0.25).start()
    yield stub
    stub.stop()


@contextlib.contextmanager
def running_proxy(upstream: StubProcess, grace_s: float) -> Iterator[ServerProcess]:
    server = processes.proxy(
        upstream.base_url,
        env={
            "DEJA_SEMANTIC__ENABLED": "false",
            "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
            "DEJA_SERVER__SHUTDOWN_GRACE_S": str(grace_s),
        },
    )
    try:
        server.wait_ready(timeout_s=60)
        yield server
    finally:
        server.stop()


async def refused(url: str) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


@dataclass(frozen=True)
class Shutdown:
    reply: Reply
    new_connection_refused: bool
    stream_ended_s: float  # after SIGTERM
    exited_s: float


async def stream_through_sigterm(server: ServerProcess) -> Shutdown:
    """Starts a streamed request, sends SIGTERM once it is under way, reads it to its end."""
    body = chat("Twelve words?", stream=True)
    async with aiohttp.ClientSession() as session, session.post(server.url + CHAT, json=body) as r:
        first = await r.content.readline()
        assert first.startswith(b"data: ")
        server.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        await asyncio.sleep(0.3)
        new_refused = await refused(server.url)
        raw = first
        with contextlib.suppress(aiohttp.ClientPayloadError):  # cut at the grace period
            async for line in r.content:
                raw += line
        reply = Reply(r.status, r.headers.copy(), raw)
        ended = time.monotonic()
    exited = await asyncio.to_thread(wait_exit, server, 30)
    return Shutdown(reply, new_refused, ended - signalled, exited - signalled)


def wait_exit(server: ServerProcess, timeout_s: float) -> float:
    try:
        server.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        raise AssertionError(
            f"the proxy did not exit within {timeout_s} s:\n{server.output()}"
        ) from None
    return time.monotonic()


async def test_sigterm_lets_the_stream_finish_refuses_new_connections_and_exits_0(
    upstream: StubProcess,
) -> None:
    with running_proxy(upstream, grace_s=10) as server:
        shutdown = await stream_through_sigterm(server)
    reply = shutdown.reply
    assert (reply.status, reply.complete, reply.text) == (200, True, WORDS)
    assert shutdown.new_connection_refused
    assert server.proc.returncode == 0, server.output()
    assert shutdown.stream_ended_s < 4  # it ran its course, about 3 s
    assert shutdown.exited_s < shutdown.stream_ended_s + EXIT_S, server.output()


async def test_a_stream_longer_than_the_grace_period_is_cut_at_its_end(
    upstream: StubProcess,
) -> None:
    with running_proxy(upstream, grace_s=1) as server:
        shutdown = await stream_through_sigterm(server)
    assert shutdown.new_connection_refused
    reply = shutdown.reply
    assert reply.status == 200 and not reply.complete  # cut: never a [DONE] it did not earn
    assert WORDS.startswith(reply.text) and reply.text != WORDS
    assert 0.9 < shutdown.stream_ended_s < 1.5
    assert server.proc.returncode == 0, server.output()
    assert shutdown.exited_s < shutdown.stream_ended_s + EXIT_S, server.output()
