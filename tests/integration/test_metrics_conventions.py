"""/metrics follows Prometheus's conventions, on a scrape of a busy proxy (real Redis, hits,
misses, bypasses, answers not stored; the model server's scrape is checked in
tests/modelserver/test_metrics_conventions.py): promtool's `check metrics` passes, the content
type names the format's version, every counter ends in `_total` and nothing else does, every
family has a HELP text of its own, units end the names, and label values stay within small
fixed sets however many distinct requests there were."""

from __future__ import annotations

from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ProxyFactory
from tests.support.metrics_conventions import (
    CONTENT_TYPE,
    convention_problems,
    label_values,
    promtool_check,
)
from tests.support.stub_upstream import StubUpstream, last_user_text


async def scrape(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == CONTENT_TYPE
        return await r.text()


async def test_a_busy_proxys_scrape_follows_the_conventions(
    proxy_factory: ProxyFactory, stub: StubUpstream, redis_url: str
) -> None:
    proxy = await proxy_factory(redis={"url": redis_url})
    # Long answers, so that Redis stores compressed bodies.
    stub.behaviour.answer = lambda body: f"Answer to: {last_user_text(body)}. " + "ok " * 300
    url = proxy.url("/v1/chat/completions")

    def chat(text: str) -> dict[str, Any]:
        return {"model": "m", "messages": [{"role": "user", "content": text}]}

    async with aiohttp.ClientSession() as s:
        for i in range(20):
            for _ in range(2):  # a miss, then its hit
                async with s.post(url, json=chat(f"question {i}")) as r:
                    assert r.status == 200
        async with s.post(url, json=chat("fresh"), headers={"Cache-Control": "no-cache"}) as r:
            assert r.headers["X-Deja-Cache"] == "bypass"
        for i in range(5):  # finish reasons the upstream made up: never a label value each
            stub.behaviour.finish_reason = f"made_up_{i}"
            async with s.post(url, json=chat(f"odd {i}")) as r:
                assert r.status == 200
        text = await scrape(s, proxy.url("/metrics"))

    assert promtool_check(text) == ""
    assert convention_problems(text) == []
    assert label_values(text, "reason") == {"other"}
    assert 'deja_not_stored_total{reason="other"} 5.0' in text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    one_minute = (("window", "1m"),)
    # 46 chat requests: 25 misses (20 questions, 5 odd ones), 20 hits, 1 bypass.
    assert samples[("deja_cache_hits_total", (("match", "exact"), ("tier", "lru_k")))] == 20
    assert samples[("deja_hit_ratio", one_minute)] == 20 / 46
    assert samples[("deja_fast_hit_ratio", one_minute)] == 20 / 46  # in-process: far under 100 ms
    assert samples[("deja_false_hit_rate_target", ())] == 0.01
    assert samples[("deja_redis_up", ())] == 1
    # 21 bodies stored (20 questions and the bypass) of ~1 kB of "ok ok ...": zlib makes them
    # several times smaller.
    assert samples[("deja_entry_compression_ratio", ())] > 3
    assert samples[("deja_entry_body_bytes_total", ())] > 21 * 900
    # Every miss is in one partition (same tenant, model, no system prompt): entropy 0.
    assert samples[("deja_miss_partition_entropy", ())] == 0
