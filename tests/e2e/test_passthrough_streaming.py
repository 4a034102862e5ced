"""Pass-through bodies stream: a 200 MB upload through a `deja serve` process reaches the
upstream whole while the proxy's resident memory stays flat, and a body past
`server.max_passthrough_bytes` is refused with a 413 while it streams."""

from __future__ import annotations

import asyncio
import io
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import httpx
import psutil
import pytest
from openai import AsyncOpenAI

from tests.conftest import ProxyFactory
from tests.support import processes
from tests.support.processes import ServerProcess
from tests.support.stub_upstream import StubUpstream

MIB = 1024 * 1024
UPLOAD_BYTES = 200 * MIB


@pytest.fixture
def upload_file() -> Iterator[Path]:
    handle, name = tempfile.mkstemp(prefix="deja-upload-", suffix=".jsonl")
    path = Path(name)
    block = os.urandom(MIB)
    with os.fdopen(handle, "wb") as out:
        for _ in range(UPLOAD_BYTES // MIB):
            out.write(block)
    yield path
    path.unlink()


class PeakRss:
    """The highest resident set size of a process, sampled every 20 ms on a thread of its own
    (the event loop is busy streaming meanwhile)."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.baseline = self._process.memory_info().rss
        self.peak = self.baseline
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.baseline


@pytest.fixture
async def proxy_process(stub: StubUpstream) -> AsyncIterator[ServerProcess]:
    server = processes.proxy(stub.base_url, env={"DEJA_SEMANTIC__ENABLED": "false"})
    try:
        await asyncio.to_thread(server.wait_ready)
        yield server
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_200_mb_upload_streams_through_in_flat_memory(
    proxy_process: ServerProcess, stub: StubUpstream, upload_file: Path
) -> None:
    async with AsyncOpenAI(
        base_url=f"{proxy_process.url}/v1", api_key="sk-test", max_retries=0, timeout=300
    ) as client:
        # A first small upload, so the baseline has every buffer a request needs.
        await client.files.create(file=("small.jsonl", b"{}\n"), purpose="batch")
        with PeakRss(proxy_process.proc.pid) as rss, upload_file.open("rb") as body:
            created = await client.files.create(file=body, purpose="batch")
    # The multipart body is the file and a few hundred bytes of framing.
    assert UPLOAD_BYTES < stub.uploaded_bytes[-1] < UPLOAD_BYTES + 4096
    assert created.bytes == stub.uploaded_bytes[-1]
    print(f"proxy RSS growth during a {UPLOAD_BYTES // MIB} MiB upload: {rss.growth / MIB:.1f} MiB")
    assert rss.growth < 32 * MIB, f"the proxy grew by {rss.growth / MIB:.0f} MiB"


async def chunks(total: int, size: int = MIB) -> AsyncIterator[bytes]:
    block = b"x" * size
    for _ in range(total // size):
        yield block


async def test_a_streamed_body_past_the_limit_gets_413(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory(server={"max_passthrough_bytes": 4 * MIB})
    async with (
        aiohttp.ClientSession() as session,
        # No Content-Length: the proxy finds out only while the body streams.
        session.post(proxy.url("/v1/files"), data=chunks(16 * MIB)) as reply,
    ):
        assert reply.status == 413
        error = (await reply.json())["error"]
    assert error["type"] == "invalid_request_error"
    assert "4194304" in error["message"]
    assert stub.uploaded_bytes == []  # the upstream never took the upload as complete


async def test_a_declared_length_past_the_limit_gets_413_before_anything_is_sent(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory(server={"max_passthrough_bytes": 4 * MIB})
    async with (
        aiohttp.ClientSession() as session,
        session.post(proxy.url("/v1/files"), data=io.BytesIO(b"x" * (5 * MIB))) as reply,
    ):
        assert reply.status == 413
    assert stub.paths == []


async def test_a_body_within_the_limit_passes_through_whole(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory(server={"max_passthrough_bytes": 4 * MIB})
    async with (
        aiohttp.ClientSession() as session,
        session.post(proxy.url("/v1/files"), data=chunks(3 * MIB)) as reply,
    ):
        assert reply.status == 200
        assert (await reply.json())["bytes"] == 3 * MIB
    assert stub.uploaded_bytes == [3 * MIB]


async def test_a_declared_length_goes_on_and_a_bodyless_request_stays_bodyless(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with (
        aiohttp.ClientSession() as session,
        session.post(proxy.url("/v1/echo/upload"), data=b"x" * 1000) as reply,
    ):
        assert (await reply.json())["body"] == "x" * 1000
    # As the SDKs send a DELETE: no body, no Content-Length.
    async with httpx.AsyncClient() as client:
        deleted = await client.delete(proxy.url("/v1/echo/files/file-1"))
    assert deleted.json()["method"] == "DELETE"
    upload, delete = stub.headers_seen
    assert upload["Content-Length"] == "1000" and "Transfer-Encoding" not in upload
    assert "Transfer-Encoding" not in delete and delete.get("Content-Length", "0") == "0"
