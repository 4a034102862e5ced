"""Shared fixtures: a real redis-server, the stub upstream, and proxies built by create_app."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, BinaryIO

import pytest
import redis
from aiohttp import web
from aiohttp.test_utils import TestServer

from core.clock import Clock
from core.config import DejaConfig
from core.config_loader import build_config, validate
from proxy.composition.app import create_app
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer
from tests.support.stub_upstream import StubUpstream

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A clean database on the shared server (restarted if a test killed it)."""
    try:
        with redis.Redis.from_url(
            redis_server.url, socket_timeout=5, socket_connect_timeout=5
        ) as client:
            client.flushall()
    except (redis.ConnectionError, redis.TimeoutError):
        redis_server.restart()
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    """Six nodes, three masters with a replica each; started by the first test that asks."""
    with RedisClusterNodes() as cluster:
        yield cluster


@pytest.fixture
def redis_cluster_url(redis_cluster: RedisClusterNodes) -> str:
    """One node's URL of the shared cluster, every master emptied (use `redis.cluster: true`)."""
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture
async def stub() -> AsyncIterator[StubUpstream]:
    upstream = StubUpstream()
    await upstream.start()
    yield upstream
    await upstream.close()


def make_config(sections: dict[str, dict[str, Any]]) -> DejaConfig:
    config = build_config(sections)
    validate(config)
    return config


ProxyFactory = Callable[..., Awaitable["RunningProxy"]]


class RunningProxy:
    def __init__(self, server: TestServer, app: web.Application) -> None:
        self.server = server
        self.app = app

    @property
    def base_url(self) -> str:
        return str(self.server.make_url("/v1"))

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))


@pytest.fixture
async def proxy_factory(stub: StubUpstream) -> AsyncIterator[ProxyFactory]:
    """Builds proxies in front of the stub upstream; sections override the test defaults."""
    servers: list[TestServer] = []

    async def factory(
        clock: Clock | None = None,
        access_log_stream: BinaryIO | None = None,
        **sections: dict[str, Any],
    ) -> RunningProxy:
        merged: dict[str, dict[str, Any]] = {
            "upstream": {"url": stub.base_url, "request_logprobs": False},
            "semantic": {"enabled": False},
            "server": {"access_log": False},
        }
        for name, values in sections.items():
            merged.setdefault(name, {}).update(values)
        app = create_app(make_config(merged), clock=clock, access_log_stream=access_log_stream)
        server = TestServer(app, host="127.0.0.1", port=0, handler_cancellation=True)
        await server.start_server()
        servers.append(server)
        return RunningProxy(server, app)

    yield factory
    for server in servers:
        await server.close()
