"""Upstreams whose OpenAI-compatible API is not at /v1 (Gemini's /v1beta/openai, OpenRouter's
/api/v1): the proxy appends the OpenAI paths to `upstream.url` as the SDKs append them to their
`base_url`, on the cached routes and on the pass-through ones."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from openai import AsyncOpenAI

from tests.conftest import ProxyFactory
from tests.support.stub_upstream import StubUpstream


@pytest.fixture(params=["/v1beta/openai", "/api/v1", "/openai/deployments/gpt-4o"])
async def prefixed(request: pytest.FixtureRequest) -> AsyncIterator[StubUpstream]:
    upstream = StubUpstream(prefix=request.param)
    await upstream.start()
    yield upstream
    await upstream.close()


async def test_every_route_reaches_the_base_path(
    proxy_factory: ProxyFactory, prefixed: StubUpstream
) -> None:
    proxy = await proxy_factory(upstream={"url": prefixed.base_url + "/"})
    base = prefixed.prefix
    messages = [{"role": "user", "content": "Where am I?"}]
    async with AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0) as client:
        chat = await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "And now?"}],
            stream=True,
        )
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        text = await client.completions.create(model="m", prompt="Say where")
        models = await client.models.list()
    async with (
        aiohttp.ClientSession() as session,
        session.post(proxy.url("/v1/echo/a/b?x=1"), data=b"hi") as response,
    ):
        echoed = await response.json()
    assert chat.choices[0].message.content == "Answer to: Where am I?"
    assert streamed == "Answer to: And now?"
    assert text.choices[0].text == "Answer to: Say where"
    assert [m.id for m in models.data] == ["stub-model"]
    assert (echoed["path"], echoed["query"], echoed["body"]) == (f"{base}/echo/a/b", "x=1", "hi")
    assert prefixed.paths == [
        f"{base}/chat/completions",
        f"{base}/chat/completions",
        f"{base}/completions",
        f"{base}/models",
        f"{base}/echo/a/b",
    ]
