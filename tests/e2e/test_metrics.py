"""/metrics counts what happened, and /readyz reports state. (That the shipped Grafana dashboard
plots only what a scrape contains: tests/deploy/test_grafana_queries.py.)"""

from __future__ import annotations

import io
import json

import aiohttp

from proxy.composition.app import PARTS
from tests.conftest import ProxyFactory


async def test_a_miss_and_its_hit_are_counted(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory()
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    async with aiohttp.ClientSession() as s:
        for _ in range(2):
            async with s.post(proxy.url("/v1/chat/completions"), json=body) as r:
                await r.read()
        async with s.get(proxy.url("/metrics")) as r:
            assert r.status == 200
            text = await r.text()
    assert 'deja_cache_hits_total{match="exact",tier="lru_k"} 1.0' in text
    assert 'deja_requests_total{cache="miss",route="chat",status="200"} 1.0' in text


async def test_the_lemma_hits_estimate_and_switch_are_gauges(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory()

    async def scrape() -> str:
        async with aiohttp.ClientSession() as s, s.get(proxy.url("/metrics")) as r:
            assert r.status == 200
            return await r.text()

    text = await scrape()
    for gauge in (
        "deja_false_hit_rate_lemma 0.0",
        "deja_false_hit_rate_lemma_low 0.0",
        "deja_false_hit_rate_lemma_high 1.0",
        "deja_verified_lemma_hits_total 0.0",
        "deja_lemma_hits_on 1.0",
    ):
        assert gauge in text.splitlines(), gauge
    switch = proxy.app[PARTS].store.lemma_hits
    switch.record(False)
    switch.record(False)  # 2 wrong of 2 verified lemma hits: off
    lines = (await scrape()).splitlines()
    assert "deja_lemma_hits_on 0.0" in lines and "deja_false_hit_rate_lemma 1.0" in lines
    assert "deja_verified_lemma_hits_total 2.0" in lines


async def test_the_learned_hits_estimate_is_a_gauge_of_its_own(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory()

    async def scrape() -> list[str]:
        async with aiohttp.ClientSession() as s, s.get(proxy.url("/metrics")) as r:
            assert r.status == 200
            return (await r.text()).splitlines()

    lines = await scrape()
    assert "deja_false_hit_rate_learned 0.0" in lines
    assert "deja_false_hit_rate_learned_high 1.0" in lines
    proxy.app[PARTS].store.thresholds.learned_hits.estimator.record(False)
    lines = await scrape()
    assert "deja_false_hit_rate_learned 1.0" in lines
    assert "deja_verified_learned_hits_total 1.0" in lines
    assert "deja_verified_hits_total 0.0" in lines


async def test_readyz_reports_breaker_and_redis(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s, s.get(proxy.url("/readyz")) as r:
        report = await r.json()
    assert r.status == 200
    assert report["status"] == "ready"
    assert report["breaker"]["state"] == "closed"
    assert report["redis"] == {"configured": False, "available": False}


async def test_the_access_log_has_a_line_per_request_without_prompt_or_key(
    proxy_factory: ProxyFactory,
) -> None:
    log = io.BytesIO()  # the proxy's access log stream (stderr when served)
    proxy = await proxy_factory(access_log_stream=log, server={"access_log": True})
    body = {"model": "m", "messages": [{"role": "user", "content": "secret-prompt-text"}]}
    headers = {"Authorization": "Bearer sk-client-key-123", "X-Request-Id": "trace-1"}
    async with aiohttp.ClientSession() as s:
        for _ in range(2):
            async with s.post(proxy.url("/v1/chat/completions"), json=body, headers=headers) as r:
                await r.read()
        async with s.get(proxy.url("/metrics")) as r:  # a scrape drains the ledger
            await r.read()
    logged = log.getvalue().decode()
    assert "secret-prompt-text" not in logged and "sk-client-key-123" not in logged
    records = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]
    ours = [r for r in records if r.get("request_id") == "trace-1"]
    assert [r["cache"] for r in ours] == ["miss", "hit"]
    assert all(r["route"] == "chat" and r["status"] == 200 and r["tenant"] for r in ours)
    assert ours[1]["tier"] == "lru_k" and ours[1]["entry"] == ours[0]["entry"]
