"""A miss's own steps on the event loop wait for turns of the upstream lane (core/pacing.py):
sending it upstream, parsing a whole answer and writing it to the client; a hit takes none, and
a live stream is not held up after its send."""

from __future__ import annotations

from typing import Any

import aiohttp

from proxy.composition.app import PARTS
from tests.conftest import ProxyFactory
from tests.support.stub_upstream import StubUpstream


def body(question: str, stream: bool = False) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}], "stream": stream}


async def test_a_miss_takes_three_turns_and_a_hit_none(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    lane = proxy.app[PARTS].upstream.upstream_turns
    url = proxy.url("/v1/chat/completions")
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body("What is a turn?")) as response:
            assert response.headers["X-Deja-Cache"] == "miss"
            assert (await response.json())["choices"][0]["message"]["content"]
        assert lane.granted == 3  # the send, the parse, the write
        async with session.post(url, json=body("What is a turn?")) as response:
            assert response.headers["X-Deja-Cache"] == "hit"
            await response.read()
        assert lane.granted == 3
        assert lane.waiting == 0


async def test_a_streamed_miss_takes_one_turn_to_send(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    lane = proxy.app[PARTS].upstream.upstream_turns
    async with aiohttp.ClientSession() as session:
        url = proxy.url("/v1/chat/completions")
        async with session.post(url, json=body("Stream it", stream=True)) as response:
            assert response.headers["X-Deja-Cache"] == "miss"
            text = await response.text()
        assert text.rstrip().endswith("data: [DONE]")
        assert lane.granted == 1
