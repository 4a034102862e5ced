"""Multi-byte text through the proxy when the upstream's reads cut its characters.

The upstream writes its event stream in slices of 1 to 3 bytes, so Chinese, accented and
emoji characters and the CRLFs between lines straddle two network reads. Through the official
openai client, the streamed miss, the stored entry, a streamed hit and a JSON hit must all be
the upstream's answer, byte for byte, on the chat, text completions and Responses routes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI

from tests.conftest import ProxyFactory, RunningProxy
from tests.support.sliced_upstream import SlicedUpstream

TOKEN = "admin-secret"
ANSWERS = {
    "chinese": "巴黎是法国的首都，也是法国最大的城市。塞纳河穿城而过。",
    "accented": "Ça coûte très cher, señor: naïve façade à Ærø, Łódź et Škoda.",
    "emoji": "Bravo 👍🏽! Family 👨‍👩‍👧, love ❤️, flag 🇫🇷, rocket 🚀 and 𝄞.",
}
LINE_ENDS = {"crlf": "\r\n", "lf": "\n", "cr": "\r"}
# Each answer on each route, and each route with each of the three line ends.
CASES = [
    ("chat", "chinese", "crlf"),
    ("chat", "accented", "lf"),
    ("chat", "emoji", "cr"),
    ("completions", "chinese", "cr"),
    ("completions", "accented", "crlf"),
    ("completions", "emoji", "lf"),
    ("responses", "chinese", "lf"),
    ("responses", "accented", "cr"),
    ("responses", "emoji", "crlf"),
]


@pytest.fixture
async def sliced() -> AsyncIterator[SlicedUpstream]:
    upstream = SlicedUpstream({f"question {k}": v for k, v in ANSWERS.items()})
    await upstream.start()
    yield upstream
    await upstream.close()


async def ask(client: AsyncOpenAI, route: str, question: str, stream: bool) -> tuple[str, Any]:
    """The answer's text as the client got it, and the response headers."""
    if route == "responses":
        responses = client.responses.with_raw_response
        if not stream:
            raw_response = await responses.create(model="m", input=question)
            return raw_response.parse().output_text, raw_response.headers
        raw_events = await responses.create(model="m", input=question, stream=True)
        events = [e async for e in raw_events.parse()]
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert events[-1].type == "response.completed"
        assert deltas == events[-1].response.output_text
        return deltas, raw_events.headers
    if route == "chat":
        messages: Any = [{"role": "user", "content": question}]
        chat = client.chat.completions.with_raw_response
        if not stream:
            raw = await chat.create(model="m", messages=messages)
            return raw.parse().choices[0].message.content or "", raw.headers
        raw_stream = await chat.create(model="m", messages=messages, stream=True)
        parts = [c.choices[0].delta.content or "" async for c in raw_stream.parse() if c.choices]
        return "".join(parts), raw_stream.headers
    text = client.completions.with_raw_response
    if not stream:
        raw_text = await text.create(model="m", prompt=question)
        return raw_text.parse().choices[0].text, raw_text.headers
    raw_text_stream = await text.create(model="m", prompt=question, stream=True)
    pieces = [c.choices[0].text async for c in raw_text_stream.parse() if c.choices]
    return "".join(pieces), raw_text_stream.headers


async def stored_completion(proxy: RunningProxy, entry_id: str) -> dict[str, Any]:
    """The entry's completion as the admin API reads it back from the tier (once stored)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as session:
        for _ in range(250):
            async with session.get(
                proxy.url(f"/admin/v1/entries/{entry_id}"), headers=headers
            ) as reply:
                if reply.status == 200:
                    return dict((await reply.json())["completion"])
                assert reply.status == 404, await reply.text()
            await asyncio.sleep(0.02)
    raise AssertionError(f"{entry_id} was never stored")


def stored_text(route: str, completion: dict[str, Any]) -> str:
    if route == "responses":
        return str(completion["output"][0]["content"][0]["text"])
    choice = completion["choices"][0]
    return str(choice["message"]["content"] if route == "chat" else choice["text"])


@pytest.mark.parametrize(("route", "language", "line_end"), CASES, ids=["-".join(c) for c in CASES])
async def test_characters_cut_between_reads_arrive_whole_on_miss_store_and_hits(
    proxy_factory: ProxyFactory, sliced: SlicedUpstream, route: str, language: str, line_end: str
) -> None:
    sliced.line_end = LINE_ENDS[line_end]
    answer = ANSWERS[language]
    proxy = await proxy_factory(upstream={"url": sliced.base_url}, admin={"token": TOKEN})
    async with AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0) as client:
        miss, miss_headers = await ask(client, route, f"question {language}", stream=True)
        assert miss_headers["X-Deja-Cache"] == "miss"
        assert miss.encode() == answer.encode()

        completion = await stored_completion(proxy, miss_headers["X-Deja-Entry"])
        assert stored_text(route, completion).encode() == answer.encode()

        for stream in (True, False):
            hit, hit_headers = await ask(client, route, f"question {language}", stream=stream)
            assert hit_headers["X-Deja-Cache"] == "hit", f"stream={stream}"
            assert hit.encode() == answer.encode(), f"stream={stream}"
    assert len(sliced.calls) == 1
    # The upstream did cut characters (and, with CRLF line ends, a CRLF) between its writes.
    assert sliced.cut_characters > 0
    assert sliced.cut_crlfs > 0 or line_end != "crlf"
