"""`/v1/embeddings` through the proxy with the official openai client, in front of the stub
upstream: each input cached on its own, only the misses sent upstream, vectors exactly the
upstream's in either encoding."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import aiohttp
import numpy as np
import pytest
from openai import AsyncOpenAI, BadRequestError

from tests.conftest import ProxyFactory, RunningProxy
from tests.support.stub_embeddings import stub_vector
from tests.support.stub_upstream import Behaviour, StubUpstream

MODEL = "text-embedding-3-small"
TEXTS = [f"sentence number {i} about caches" for i in range(100)]


def client_for(base_url: str, key: str = "sk-test") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)


def as_float32(vectors: list[list[float]]) -> np.ndarray:
    return np.asarray(vectors, dtype=np.float64).astype(np.float32)


async def embed(client: AsyncOpenAI, inputs: Any, **kwargs: Any) -> tuple[Any, dict[str, str]]:
    raw = await client.embeddings.with_raw_response.create(model=MODEL, input=inputs, **kwargs)
    return raw.parse(), dict(raw.headers)


async def test_a_batch_of_100_with_60_cached_sends_the_40_others_in_one_call(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        _, first = await embed(client, TEXTS[:60])
        result, second = await embed(client, TEXTS)
    assert first["x-deja-cache"] == "miss" and first["x-deja-inputs-cached"] == "0/60"
    assert second["x-deja-cache"] == "partial" and second["x-deja-inputs-cached"] == "60/100"
    assert stub.embedding_calls == [TEXTS[:60], TEXTS[60:]]
    assert [d.index for d in result.data] == list(range(100))
    expected = np.stack([stub_vector(MODEL, t, None) for t in TEXTS])
    # The SDK asks for base64 by default: the float32 values are the upstream's, bit for bit.
    assert np.array_equal(as_float32([d.embedding for d in result.data]), expected)
    # The usage is the upstream call's: the 40 inputs sent (5 words each).
    assert result.usage.prompt_tokens == 40 * 5


@pytest.mark.parametrize("encoding", ["float", "base64"])
async def test_vectors_are_the_upstreams_on_a_miss_and_on_a_hit_in_either_encoding(
    proxy_factory: ProxyFactory, stub: StubUpstream, encoding: Any
) -> None:
    proxy = await proxy_factory()
    texts = TEXTS[:5]
    async with (
        client_for(proxy.base_url) as through,
        client_for(stub.base_url) as direct,
    ):
        upstream, _ = await embed(direct, texts, encoding_format=encoding)
        miss, miss_headers = await embed(through, texts, encoding_format=encoding)
        # A hit written in the other encoding than the one stored holds the same values.
        other = "base64" if encoding == "float" else "float"
        await embed(through, texts, encoding_format=other)
        hit, hit_headers = await embed(through, texts, encoding_format=encoding)
    assert (miss_headers["x-deja-cache"], hit_headers["x-deja-cache"]) == ("miss", "hit")
    assert hit_headers["x-deja-inputs-cached"] == "5/5"
    want = [d.embedding for d in upstream.data]
    assert [d.embedding for d in miss.data] == want
    assert [d.embedding for d in hit.data] == want
    assert hit.usage.prompt_tokens == 0
    assert len(stub.embedding_calls) == 2  # the direct call and the proxy's one miss


async def test_raw_base64_is_the_float32_bytes(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        for _ in range(2):
            raw = await client.embeddings.with_raw_response.create(
                model=MODEL, input="hello", encoding_format="base64"
            )
            body = raw.http_response.json()
            vector = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), "<f4")
            assert np.array_equal(vector, stub_vector(MODEL, "hello", None))
    assert raw.headers["x-deja-cache"] == "hit"


async def test_repeated_inputs_in_a_batch_are_sent_once_and_answered_in_place(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    batch = ["a", "b", "a", "c", "b"]
    async with client_for(proxy.base_url) as client:
        result, headers = await embed(client, batch)
    assert stub.embedding_calls == [["a", "b", "c"]]
    assert headers["x-deja-inputs-cached"] == "0/5"
    got = as_float32([d.embedding for d in result.data])
    assert np.array_equal(got, np.stack([stub_vector(MODEL, t, None) for t in batch]))


async def test_dimensions_are_part_of_the_key(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        short, _ = await embed(client, ["x"], dimensions=8)
        full, headers = await embed(client, ["x"])
        again, again_headers = await embed(client, ["x"], dimensions=8)
    assert headers["x-deja-cache"] == "miss"
    assert again_headers["x-deja-cache"] == "hit"
    assert len(short.data[0].embedding) == 8 and len(full.data[0].embedding) == 24
    assert again.data[0].embedding == short.data[0].embedding
    assert len(stub.embedding_calls) == 2


async def test_the_model_is_part_of_the_key(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        await embed(client, ["x"])
        raw = await client.embeddings.with_raw_response.create(model="other-model", input=["x"])
    assert raw.headers["x-deja-cache"] == "miss"
    assert np.array_equal(
        as_float32([raw.parse().data[0].embedding])[0], stub_vector("other-model", "x", None)
    )


async def test_a_tenant_never_gets_another_tenants_vectors(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url, "sk-alice") as alice:
        await embed(alice, TEXTS[:3])
    async with client_for(proxy.base_url, "sk-bob") as bob:
        _, bob_headers = await embed(bob, TEXTS[:3])
    async with client_for(proxy.base_url, "sk-alice") as alice:
        _, again = await embed(alice, TEXTS[:3])
    assert bob_headers["x-deja-cache"] == "miss" and bob_headers["x-deja-inputs-cached"] == "0/3"
    assert again["x-deja-cache"] == "hit"
    assert stub.embedding_calls == [TEXTS[:3], TEXTS[:3]]


async def test_token_array_inputs(proxy_factory: ProxyFactory, stub: StubUpstream) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        one, _ = await embed(client, [1, 2, 3])
        batch, headers = await embed(client, [[1, 2, 3], [4, 5]])
        # The text "1, 2, 3" and the tokens [1, 2, 3] are different inputs.
        text, text_headers = await embed(client, ["[1,2,3]"])
    assert headers["x-deja-inputs-cached"] == "1/2"
    assert stub.embedding_calls == [[[1, 2, 3]], [[4, 5]], ["[1,2,3]"]]
    assert batch.data[0].embedding == one.data[0].embedding
    assert np.array_equal(
        as_float32([batch.data[1].embedding])[0], stub_vector(MODEL, [4, 5], None)
    )
    assert text_headers["x-deja-cache"] == "miss"
    assert text.data[0].embedding != one.data[0].embedding


async def test_upstream_errors_pass_through_unchanged_and_store_nothing(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    stub.behaviour = Behaviour(status=400, failures=1, error_code="invalid_input")
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        with pytest.raises(BadRequestError) as refused:
            await embed(client, ["x", "y"])
        _, headers = await embed(client, ["x", "y"])
    assert refused.value.status_code == 400
    assert refused.value.body == {
        "message": "stub failure 400",
        "type": "invalid_request_error",
        "code": "invalid_input",
    }
    assert refused.value.response.headers["x-deja-cache"] == "miss"
    assert headers["x-deja-cache"] == "miss"  # nothing was stored by the failure
    assert stub.embedding_calls == [["x", "y"]]


async def test_cache_controls_apply_as_on_chat(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        _, no_store = await embed(client, ["x"], extra_headers={"Cache-Control": "no-store"})
        _, after_no_store = await embed(client, ["x"])
        _, no_cache = await embed(client, ["x"], extra_headers={"Cache-Control": "no-cache"})
        _, namespaced = await embed(client, ["x"], extra_headers={"X-Deja-Namespace": "n1"})
        _, plain = await embed(client, ["x"])
    assert no_store["x-deja-cache"] == "miss"
    assert after_no_store["x-deja-cache"] == "miss"
    assert no_cache["x-deja-cache"] == "bypass"
    assert namespaced["x-deja-cache"] == "miss"
    assert plain["x-deja-cache"] == "hit"
    assert len(stub.embedding_calls) == 4


async def test_an_invalid_input_is_a_400_naming_it(proxy_factory: ProxyFactory) -> None:
    proxy: RunningProxy = await proxy_factory()
    async with client_for(proxy.base_url) as client:
        with pytest.raises(BadRequestError) as refused:
            await client.embeddings.create(model=MODEL, input=[{"text": "x"}])  # type: ignore[list-item]
    assert refused.value.body is not None
    assert refused.value.body["param"] == "input"  # type: ignore[index]


async def test_the_access_log_and_metrics_count_the_batch(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    log = io.BytesIO()
    proxy = await proxy_factory(access_log_stream=log, server={"access_log": True})
    async with client_for(proxy.base_url) as client:
        await embed(client, TEXTS[:3])
        await embed(client, TEXTS[:5])
    async with aiohttp.ClientSession() as session, session.get(proxy.url("/metrics")) as r:
        metrics = await r.text()  # a scrape drains the ledger
    records = [json.loads(line) for line in log.getvalue().decode().splitlines()]
    assert [(r["route"], r["cache"], r["inputs_cached"], r["inputs"]) for r in records] == [
        ("embeddings", "miss", 0, 3),
        ("embeddings", "partial", 3, 5),
    ]
    assert "sentence number" not in log.getvalue().decode()
    assert 'deja_requests_total{cache="partial",route="embeddings",status="200"} 1.0' in metrics
    # Each input is a lookup: 3 hits, 3 + 2 misses.
    assert "deja_cache_misses_total 5.0" in metrics
    assert 'deja_cache_hits_total{match="exact",tier="lru_k"} 3.0' in metrics
    # Each stored input kept its share of its call's prompt tokens (5 words each here).
    assert "deja_tokens_saved_total 15.0" in metrics
