"""`semantic.backend: redis-search` end to end: real spaCy, MiniLM and a Redis Stack server,
two real proxies that hold no vectors. Paraphrases hit, questions the guards tell apart do
not, and a replica that never saw an entry finds it at once (no partition to load: Redis
searched it). Against a Redis without the search module the proxy does not become ready, and
/readyz says why.

Needs Redis Stack (`make redis-stack`; `make test` installs it); skipped, saying so, without.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.semantic.test_semantic_proxy import ask, first_then
from tests.support.processes import ServerProcess, proxy
from tests.support.redis_server import RedisServer, free_port
from tests.support.redis_stack import INSTALL_HINT, find_redis_stack, redis_stack_server
from tests.support.stub_process import stub_argv

pytestmark = [
    pytest.mark.models,
    pytest.mark.redis,
    # Two proxies' model processes load before they are ready: minutes on a busy 2-core machine.
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        find_redis_stack() is None, reason=f"Redis Stack is not installed: {INSTALL_HINT}"
    ),
]

BACKEND = {"DEJA_SEMANTIC__ENABLED": "true", "DEJA_SEMANTIC__BACKEND": "redis-search"}


class Fleet:
    def __init__(self, a: ServerProcess, b: ServerProcess) -> None:
        self.a, self.b = a, b


@pytest.fixture(scope="module")
def stub() -> Iterator[ServerProcess]:
    port = free_port()
    server = ServerProcess("stub", stub_argv(port), port)
    try:
        server.wait_ready("/v1/models", timeout_s=30)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def fleet(stub: ServerProcess) -> Iterator[Fleet]:
    stack = find_redis_stack()
    assert stack is not None
    started: list[ServerProcess] = []
    with redis_stack_server(stack) as redis:
        try:
            for _ in range(2):
                started.append(proxy(f"{stub.url}/v1", redis.url, env=BACKEND))
            for replica in started:
                replica.wait_ready(timeout_s=600)
            yield Fleet(*started)
        finally:
            for replica in started:
                replica.stop()


def test_paraphrases_hit_and_different_questions_do_not(fleet: Fleet) -> None:
    headers, answer = first_then(
        fleet.a, "How do I reset my password?", "How can I reset my password?"
    )
    assert headers["X-Deja-Cache"] == "hit", headers
    assert answer == "Answer to: How do I reset my password?"
    headers, answer = first_then(
        fleet.a, "Convert 100 USD to EUR", "Convert 250 USD to EUR", key="sk-numbers"
    )
    assert headers["X-Deja-Cache"] == "miss", headers  # the number guard, on Redis's candidate
    assert answer == "Answer to: Convert 250 USD to EUR"


def test_another_replica_finds_an_entry_it_never_held(fleet: Fleet) -> None:
    headers, _ = ask(fleet.a, "What is the boiling point of water at sea level?", key="sk-b")
    assert headers["X-Deja-Cache"] == "miss"
    headers, answer = ask(fleet.b, "At sea level, what's the boiling point of water?", key="sk-b")
    assert headers["X-Deja-Cache"] == "hit", headers
    assert headers["X-Deja-Match"] == "semantic"
    assert answer == "Answer to: What is the boiling point of water at sea level?"


def readiness_error(replica: ServerProcess, timeout_s: float) -> str:
    """/readyz's body once it reports a failed start-up ("" if it never does in time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{replica.url}/readyz", timeout=5):
                return ""  # ready: no error to report
        except urllib.error.HTTPError as refused:
            body = refused.read().decode()
            refused.close()
            if "failed" in body:
                return body
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)
    return ""


def test_a_redis_without_the_search_module_keeps_the_proxy_unready(stub: ServerProcess) -> None:
    with RedisServer() as plain:
        replica = proxy(f"{stub.url}/v1", plain.url, env=BACKEND)
        try:
            error = readiness_error(replica, timeout_s=600)
        finally:
            replica.stop()
    assert "semantic.backend redis-search" in error, error
