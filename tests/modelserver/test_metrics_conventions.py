"""The model server's /metrics follows Prometheus's conventions (as the proxy's does:
tests/integration/test_metrics_conventions.py), on a scrape after a few completions."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from modelserver.runtime import Runtime
from modelserver.server import create_app
from tests.modelserver.conftest import tiny_config
from tests.support.metrics_conventions import CONTENT_TYPE, convention_problems, promtool_check


async def test_the_model_servers_scrape_follows_the_conventions(
    make_tiny_runtime: Callable[..., Runtime],
) -> None:
    config = tiny_config()
    app = create_app(config, make_tiny_runtime())
    async with TestClient(TestServer(app)) as client:
        for text in ("hello there", "hello there", "general kenobi"):
            body = {"model": "random-tiny", "messages": [{"role": "user", "content": text}]}
            response = await client.post("/v1/chat/completions", json=body | {"max_tokens": 8})
            assert response.status == 200
            await response.read()
        response = await client.get("/metrics")
        assert response.headers["Content-Type"] == CONTENT_TYPE
        text = await response.text()

    assert promtool_check(text) == ""
    assert convention_problems(text) == []
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }
    assert values["deja_modelserver_requests_finished_total"] == 3
    assert values["deja_modelserver_kv_pool_blocks"] == config.kv_cache_blocks
    assert 0 <= values["deja_modelserver_kv_pool_usage_ratio"] <= 1
    assert values["deja_modelserver_prefix_cache_hit_tokens_total"] > 0  # the repeated prompt
