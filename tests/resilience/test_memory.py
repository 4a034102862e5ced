"""Resident memory of a real `deja serve` process under a long run of fuzzed requests.

After a warm-up (the cache then holds the answers to every valid question the fuzzer asks, and
each code path has run), memory must stay flat: less than 50 MB of growth over 10,000 more
requests (50,000 in `make test-all`). Every response is checked on the way.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.resilience.client import Reply
from tests.resilience.fuzz import random_request
from tests.resilience.test_bad_input import assert_answered_or_refused
from tests.support import processes
from tests.support.processes import ServerProcess
from tests.support.stub_process import StubProcess

GROWTH_LIMIT_MB = 50
CONCURRENCY = 8


@pytest.fixture
def proxy() -> Iterator[ServerProcess]:
    stub = StubProcess().start()
    server = processes.proxy(
        stub.base_url,
        env={"DEJA_SEMANTIC__ENABLED": "false", "DEJA_SERVER__ACCESS_LOG": "false"},
    )
    try:
        server.wait_ready(timeout_s=60)
        yield server
    finally:
        server.stop()
        stub.stop()


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


async def fuzz(url: str, rng: random.Random, count: int) -> None:
    queue = [random_request(rng) for _ in range(count)]

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            path, data = queue.pop()
            headers = {"Content-Type": "application/json"}
            async with session.post(url + path, data=data, headers=headers) as response:
                reply = Reply(response.status, response.headers.copy(), await response.read())
            assert_answered_or_refused(reply, path)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(CONCURRENCY)))


@pytest.mark.parametrize(
    "warm_up,count",
    [(2_000, 10_000), pytest.param(2_000, 50_000, marks=pytest.mark.slow)],
    ids=["10k", "50k"],
)
async def test_memory_stays_flat_over_fuzzed_requests(
    proxy: ServerProcess, warm_up: int, count: int
) -> None:
    rng = random.Random(5)
    await fuzz(proxy.url, rng, warm_up)
    before_mb = resident_mb(proxy.proc.pid)
    await fuzz(proxy.url, rng, count)
    after_mb = resident_mb(proxy.proc.pid)
    assert proxy.proc.poll() is None, proxy.output()
    print(f"resident memory: {before_mb:.1f} MB → {after_mb:.1f} MB over {count} requests")
    assert after_mb - before_mb < GROWTH_LIMIT_MB, (before_mb, after_mb)
