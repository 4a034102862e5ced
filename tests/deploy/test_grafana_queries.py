"""The Grafana dashboard (deploy/grafana-dashboard.json) plots only what the processes export:
every metric its queries name is in a real scrape of a busy proxy (Redis, hits, misses) or of
the model server (tiny random model). And it is provisioned as docker-compose runs it:
Prometheus the data source under the uid the dashboard defaults to, the dashboard file mounted
where the provider looks, every query filtered by `$instance`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from modelserver.runtime import build_runtime
from modelserver.server import create_app as create_modelserver
from modelserver.weights import load_model
from tests.conftest import ProxyFactory
from tests.modelserver.conftest import tiny_config
from tests.support.stub_upstream import StubUpstream

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"
COMPOSE = ROOT / "docker-compose.yml"
# Series Prometheus makes itself for every target.
PROMETHEUS_OWN = {"up"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
_KEYWORDS |= {"and", "or", "unless", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers, less functions, keywords,
    label names (in matchers and in by/on lists), strings and durations."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\boffset\s+\w+", "", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", expr):
        if match[2] is None and match[1].lower() not in _KEYWORDS:
            names.add(match[1])
    return names


def test_metric_names_finds_metrics_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, cache) (rate(x_bucket{instance=~"$instance",'
        ' cache="hit"}[5m]))) / on (instance) y_total offset 1h and z'
    )
    assert metric_names(expr) == {"x_bucket", "y_total", "z"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def exported_names(text: str) -> set[str]:
    """Every sample name a scrape holds, and its families' names (a family declared with no
    sample yet, such as a degraded kind never served, counts: Prometheus would store it as soon
    as it has one)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name + ("_total" if family.type == "counter" else ""))
        names |= {sample.name for sample in family.samples}
    return names


async def busy_proxy_scrape(proxy_factory: ProxyFactory, stub: StubUpstream, redis: str) -> str:
    proxy = await proxy_factory(redis={"url": redis})
    url = proxy.url("/v1/chat/completions")
    async with aiohttp.ClientSession() as s:
        for text in ("a", "a", "b"):
            body = {"model": "m", "messages": [{"role": "user", "content": text}]}
            async with s.post(url, json=body) as r:
                assert r.status == 200
        async with s.get(proxy.url("/metrics")) as r:
            return await r.text()


async def modelserver_scrape() -> str:
    config = tiny_config()
    loaded = load_model("random:tiny", cache_dir=Path("/nonexistent"), random_seed=0)
    app = create_modelserver(config, build_runtime(config, loaded=loaded))
    async with TestClient(TestServer(app)) as client:
        body = {"model": "random-tiny", "messages": [{"role": "user", "content": "hi"}]}
        response = await client.post("/v1/chat/completions", json=body | {"max_tokens": 4})
        await response.read()
        response = await client.get("/metrics")
        return await response.text()


async def test_every_query_names_a_metric_a_scrape_contains(
    proxy_factory: ProxyFactory, stub: StubUpstream, redis_url: str
) -> None:
    exported = exported_names(await busy_proxy_scrape(proxy_factory, stub, redis_url))
    exported |= exported_names(await modelserver_scrape())
    named = set().union(*(metric_names(q) for q in queries()))
    assert named, "no query found"
    for variable in dashboard()["templating"]["list"]:  # the instance variable's series too
        if variable["type"] == "query":
            named |= set(re.findall(r"deja_\w+", variable["query"]["query"]))
    assert named - exported - PROMETHEUS_OWN == set()
    # The panels the operator asked for, on the model server.
    for metric in (
        "deja_modelserver_generation_tokens_total",
        "deja_modelserver_queue_depth",
        "deja_modelserver_kv_pool_usage_ratio",
        "deja_modelserver_prefix_cache_hit_tokens_total",
    ):
        assert metric in named, metric


def test_every_query_is_filtered_by_the_instance_variable() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert set(variables) == {"datasource", "instance"}
    # Grafana's own function, not PromQL: the instances exporting a series only a proxy or only
    # a model server has, whatever the scrape jobs are called (compose's, a Kubernetes pod's).
    instance_query = variables["instance"]["query"]["query"]
    match = re.fullmatch(r'label_values\(\{__name__=~"([\w|]+)"\}, instance\)', instance_query)
    assert match is not None, instance_query
    assert set(match[1].split("|")) == {"deja_ready", "deja_modelserver_engine_alive"}
    for expr in queries():
        for selector in re.findall(r"deja_\w+(\{[^}]*\})?", expr):
            assert 'instance=~"$instance"' in selector, expr


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    grafana = compose["services"]["grafana"]
    assert grafana["profiles"] == ["observability"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    for source in mounts:
        assert (ROOT / source).is_file(), source
    provisioned: dict[str, Any] = {}
    for source, target in mounts.items():
        if target.startswith("/etc/grafana/provisioning/"):
            provisioned[target.split("/")[4]] = yaml.safe_load((ROOT / source).read_text())
    (source,) = provisioned["datasources"]["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    (datasource_variable,) = [
        v for v in dashboard()["templating"]["list"] if v["type"] == "datasource"
    ]
    assert datasource_variable["current"]["value"] == source["uid"]
    (provider,) = provisioned["dashboards"]["providers"]
    folder = provider["options"]["path"]
    assert mounts["./deploy/grafana-dashboard.json"].startswith(folder.rstrip("/") + "/")
    prometheus_port = compose["services"]["prometheus"]["ports"][0].split(":")[-1]
    assert source["url"].endswith(f":{prometheus_port}")
