"""The production transport over real sockets, behind the client: what aiohttp's failures become.

The client's retries and waits are tested over the fake transport (tests/unit); this checks the
one place aiohttp's exceptions are translated, against the stub upstream and a closed port.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.config import UpstreamConfig
from core.errors import UpstreamProtocolError, UpstreamTimeout, UpstreamUnreachable
from proxy.upstream.aiohttp_transport import AiohttpTransport
from proxy.upstream.client import UpstreamClient, UpstreamRequest
from tests.support.redis_server import free_port
from tests.support.stub_upstream import StubUpstream


def chat(stream: bool) -> UpstreamRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": stream}
    headers = (("Content-Type", "application/json"),)
    return UpstreamRequest("POST", "chat/completions", headers, json.dumps(body).encode())


def client_for(url: str, **changes: float) -> UpstreamClient:
    config = replace(UpstreamConfig(url=url, max_retries=0), **changes)
    return UpstreamClient(config, AiohttpTransport(config))


async def test_a_stream_arrives_whole(stub: StubUpstream) -> None:
    client = client_for(stub.base_url)
    await client.start()
    try:
        async with await client.open(chat(stream=True)) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/event-stream"
            body = b"".join([chunk async for chunk in response.iter_chunks()])
    finally:
        await client.close()
    assert body.endswith(b"data: [DONE]\n\n")


async def test_a_closed_port_is_unreachable() -> None:
    client = client_for(f"http://127.0.0.1:{free_port()}/v1")
    await client.start()
    try:
        with pytest.raises(UpstreamUnreachable, match="cannot connect to the upstream"):
            await client.open(chat(stream=False))
    finally:
        await client.close()


async def test_a_connection_dropped_mid_stream_is_a_protocol_error(stub: StubUpstream) -> None:
    stub.behaviour.drop_after_chunks = 2
    client = client_for(stub.base_url)
    await client.start()
    try:
        async with await client.open(chat(stream=True)) as response:
            with pytest.raises(UpstreamProtocolError, match="broke off"):
                async for _ in response.iter_chunks():
                    pass
    finally:
        await client.close()


async def test_an_upstream_that_never_answers_is_a_first_byte_timeout(stub: StubUpstream) -> None:
    stub.behaviour.hang = True
    client = client_for(stub.base_url, first_byte_timeout_s=0.2)
    await client.start()
    try:
        with pytest.raises(UpstreamTimeout, match="sent nothing"):
            await client.open(chat(stream=False))
    finally:
        await client.close()
