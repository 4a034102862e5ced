"""The upstream client over a fake transport: what it sends, which outcomes it retries and after
how long, its timeouts, and what a broken or silent response becomes.

Waits between attempts go through the `pause` the caller passes (here a recorder), the backoff's
jitter comes from a seeded generator, and HTTP dates are read against a ManualClock, so every
wait is asserted exactly and nothing sleeps.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from core.clock import ManualClock
from core.config import UpstreamConfig
from core.errors import UpstreamProtocolError, UpstreamTimeout, UpstreamUnreachable
from proxy.upstream.client import UpstreamClient, UpstreamRequest
from tests.support.fake_upstream import (
    FakeTransport,
    Refused,
    Scripted,
    Silent,
    error_reply,
    json_reply,
    sse_reply,
)

CONFIG = UpstreamConfig(
    url="http://upstream.test/v1beta/openai/",
    max_retries=2,
    retry_backoff_s=0.1,
    retry_backoff_max_s=0.3,
    retry_after_max_s=10.0,
    first_byte_timeout_s=0.05,
    read_timeout_s=0.05,
)
SEED = 3
CHAT = UpstreamRequest("POST", "chat/completions", (("Authorization", "Bearer k"),), b"{}")
OK = json_reply({"ok": True})


class Pauses:
    """Records each wait between two attempts instead of sleeping."""

    def __init__(self) -> None:
        self.waits_s: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits_s.append(seconds)


def backoffs_s(*ceilings_s: float) -> list[float]:
    """The jittered waits the seeded generator gives for these backoff ceilings, in order."""
    rng = random.Random(SEED)
    return [rng.uniform(c / 2, c) for c in ceilings_s]


async def started(
    *replies: Scripted, config: UpstreamConfig = CONFIG
) -> tuple[UpstreamClient, FakeTransport]:
    transport = FakeTransport.scripted(*replies)
    client = UpstreamClient(config, transport, random.Random(SEED), ManualClock())
    await client.start()
    return client, transport


async def test_a_request_goes_to_the_base_url_as_given_and_its_response_comes_back() -> None:
    hop = (("Connection", "keep-alive"), ("Content-Length", "11"), ("X-Upstream", "1"))
    client, transport = await started(replace(OK, headers=(*OK.headers, *hop)))
    request = replace(CHAT, method="GET", path="models", query="limit=2")
    async with await client.open(request) as response:
        assert response.status == 200
        assert await response.read() == b'{"ok": true}'
        assert dict(response.forwardable_headers()) == {
            "Content-Type": "application/json",
            "X-Upstream": "1",
        }
    sent = transport.sent[0]
    assert sent.url == "http://upstream.test/v1beta/openai/models?limit=2"
    assert (sent.method, sent.headers, sent.body) == ("GET", CHAT.headers, b"{}")
    assert transport.unreleased() == 0
    await client.close()
    assert transport.closed


async def test_a_connection_error_is_retried_after_the_backoff() -> None:
    client, transport = await started(Refused(), Refused(), OK)
    pauses = Pauses()
    response = await client.open(CHAT, pause=pauses)
    assert response.status == 200 and len(transport.sent) == 3
    assert pauses.waits_s == backoffs_s(0.1, 0.2)


async def test_connection_errors_on_every_attempt_raise_unreachable() -> None:
    client, transport = await started(Refused(), Refused(), Refused("reset by peer"))
    pauses = Pauses()
    with pytest.raises(UpstreamUnreachable, match="reset by peer"):
        await client.open(CHAT, pause=pauses)
    assert len(transport.sent) == 3
    assert pauses.waits_s == backoffs_s(0.1, 0.2)  # none after the last attempt


async def test_a_5xx_is_retried_and_released_and_the_last_one_is_returned() -> None:
    client, transport = await started(error_reply(503), error_reply(502), error_reply(500))
    pauses = Pauses()
    response = await client.open(CHAT, pause=pauses)
    assert response.status == 500  # the last attempt's answer goes to the caller as it is
    assert pauses.waits_s == backoffs_s(0.1, 0.2)
    assert [body.closed for body in transport.bodies] == [True, True, False]
    response.release()


async def test_the_backoff_doubles_up_to_its_ceiling() -> None:
    config = replace(CONFIG, max_retries=4)
    client, _ = await started(*[error_reply(503)] * 4, OK, config=config)
    pauses = Pauses()
    assert (await client.open(CHAT, pause=pauses)).status == 200
    assert pauses.waits_s == backoffs_s(0.1, 0.2, 0.3, 0.3)


async def test_a_call_not_safe_to_repeat_is_sent_once() -> None:
    client, transport = await started(error_reply(503), OK)
    assert (await client.open(CHAT, retry=False, pause=Pauses())).status == 503
    assert len(transport.sent) == 1
    client, transport = await started(Refused(), OK)
    with pytest.raises(UpstreamUnreachable):
        await client.open(CHAT, retry=False, pause=Pauses())
    assert len(transport.sent) == 1


@pytest.mark.parametrize("status", [400, 401, 404, 422, 501])
async def test_other_statuses_are_final(status: int) -> None:
    client, transport = await started(error_reply(status), OK)
    assert (await client.open(CHAT, pause=Pauses())).status == status
    assert len(transport.sent) == 1


@pytest.mark.parametrize(
    ("headers", "wait_s"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),  # the finer one wins
        # An HTTP date is read against the injected wall clock: 3 s from its "now".
        ({"Retry-After": email.utils.formatdate(ManualClock().time() + 3, usegmt=True)}, 3.0),
    ],
    ids=["seconds", "milliseconds", "http-date"],
)
async def test_a_429_waits_what_its_retry_after_asks(
    headers: dict[str, str], wait_s: float
) -> None:
    client, transport = await started(error_reply(429, headers=headers), OK)
    pauses = Pauses()
    assert (await client.open(CHAT, pause=pauses)).status == 200
    assert pauses.waits_s == [wait_s]
    assert transport.bodies[0].closed  # the 429 was let go before the wait


async def test_a_429_asking_too_long_a_wait_goes_back_at_once() -> None:
    client, transport = await started(error_reply(429, headers={"Retry-After": "11"}), OK)
    pauses = Pauses()
    response = await client.open(CHAT, pause=pauses)
    assert response.status == 429 and response.headers["Retry-After"] == "11"
    assert pauses.waits_s == [] and len(transport.sent) == 1


async def test_an_exhausted_quota_is_final_and_its_body_still_reaches_the_caller() -> None:
    reply = error_reply(429, code="insufficient_quota", headers={"Retry-After": "1"})
    client, transport = await started(reply, OK)
    response = await client.open(CHAT, pause=Pauses())
    assert response.status == 429 and len(transport.sent) == 1
    whole = b"".join(reply.pieces)
    assert [chunk async for chunk in response.iter_chunks()] == [whole]
    assert await response.read() == whole


async def test_a_429_whose_body_broke_off_is_retried_like_any_429() -> None:
    broken = replace(error_reply(429, headers={"Retry-After": "1"}), broken_after=0)
    client, _ = await started(broken, OK)
    pauses = Pauses()
    assert (await client.open(CHAT, pause=pauses)).status == 200
    assert pauses.waits_s == [1.0]


async def test_no_status_line_within_the_first_byte_timeout_is_a_timeout_not_retried() -> None:
    client, transport = await started(Silent(), OK)
    with pytest.raises(UpstreamTimeout, match=r"sent nothing within 0\.05 s"):
        await client.open(CHAT, pause=Pauses())
    assert len(transport.sent) == 1


async def test_a_stream_arrives_in_the_slices_it_was_sent_in() -> None:
    reply = sse_reply([{"n": 1}, {"n": "é"}], slice_bytes=[1, 5, 2])
    client, _ = await started(reply)
    response = await client.open(CHAT)
    assert [chunk async for chunk in response.iter_chunks()] == list(reply.pieces)
    assert b"".join(reply.pieces).endswith(b"data: [DONE]\n\n")


async def test_a_stream_that_goes_silent_times_out_after_what_came() -> None:
    client, _ = await started(sse_reply([{"n": 1}, {"n": 2}], silent_after=2))
    response = await client.open(CHAT)
    received = []
    with pytest.raises(UpstreamTimeout, match="went silent"):
        async for chunk in response.iter_chunks():
            received.append(chunk)
    assert received == [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n']


async def test_a_body_that_goes_silent_times_out() -> None:
    client, _ = await started(replace(OK, silent_after=0))
    response = await client.open(CHAT)
    with pytest.raises(UpstreamTimeout, match="stopped sending"):
        await response.read()


async def test_a_stream_that_breaks_off_is_a_protocol_error_after_what_came() -> None:
    client, _ = await started(sse_reply([{"n": 1}, {"n": 2}], broken_after=1))
    response = await client.open(CHAT)
    received = []
    with pytest.raises(UpstreamProtocolError, match="broke off"):
        async for chunk in response.iter_chunks():
            received.append(chunk)
    assert received == [b'data: {"n": 1}\n\n']


async def slowly(*chunks: bytes, gap_s: float) -> AsyncIterator[bytes]:
    for chunk in chunks:
        await asyncio.sleep(gap_s)
        yield chunk


async def test_a_streamed_body_is_sent_once_and_the_first_byte_timeout_starts_after_it() -> None:
    # The upload takes 0.15 s, three times the first-byte timeout: only the wait for the
    # reply after its last byte counts.
    client, transport = await started(OK)
    upload = UpstreamRequest("POST", "files", (), slowly(b"ab", b"cd", b"ef", gap_s=0.05))
    response = await client.open(upload, retry=False)
    assert response.status == 200
    assert transport.sent[0].body == b"abcdef"
    client, _ = await started(Silent())
    silent = UpstreamRequest("POST", "files", (), slowly(b"ab", b"cd", gap_s=0.05))
    with pytest.raises(UpstreamTimeout, match=r"sent nothing within 0\.05 s"):
        await client.open(silent, retry=False)


async def test_a_streamed_body_cannot_be_retried() -> None:
    client, _ = await started(OK)
    with pytest.raises(AssertionError, match="cannot be resent"):
        await client.open(UpstreamRequest("POST", "files", (), slowly(b"x", gap_s=0)))
