"""Shared workers end to end: two light fronts (`deja serve` with `edge.worker_urls`) relaying
over TCP to one worker (`deja serve --role worker`), a real Redis and the stub upstream, each a
process of its own.

An entry stored through one front is a semantic hit through the other (the worker holds the one
index). With the worker killed, the fronts go on answering exact hits, send misses straight
upstream marked `X-Deja-Degraded: worker-unreachable`, and stay ready; once a worker listens
again they find it by themselves. A front with another secret is refused (and says so), and the
relay runs over TLS with a certificate the front checks.
"""

from __future__ import annotations

import re
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.blocking_http import Reply, eventually, http
from tests.support.processes import ServerProcess, proxy
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv

pytestmark = pytest.mark.redis

TOKEN = "shared-admin"
KEY = "sk-shared"
SECRET = "a-long-shared-secret-for-the-tests"
COMMON = {
    "DEJA_ADMIN__TOKEN": TOKEN,
    "DEJA_SERVER__ACCESS_LOG": "false",
    "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
    "DEJA_EDGE__SHARED_SECRET": SECRET,
}


def ask(server: ServerProcess, question: str, stream: bool = False) -> Reply:
    body = {"model": "m", "messages": [{"role": "user", "content": question}], "stream": stream}
    return http(server, "POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {KEY}"})


def admin(server: ServerProcess, method: str, path: str, payload: Any = None) -> Reply:
    return http(server, method, f"/admin/v1/{path}", payload, {"Authorization": f"Bearer {TOKEN}"})


def worker_process(port: int, upstream: str, redis_url: str, env: dict[str, str]) -> ServerProcess:
    argv = [
        sys.executable,
        "-m",
        "proxy.cli",
        "serve",
        "--role",
        "worker",
        "--upstream",
        upstream,
        "--redis",
        redis_url,
    ]
    full = {
        **COMMON,
        "DEJA_CACHE__TENANT_SECRET": "test",
        "DEJA_EDGE__WORKER_LISTEN": f"127.0.0.1:{port}",
        **env,
    }
    return ServerProcess("worker", argv, port, full)


class SharedStack:
    """Redis, the stub upstream, one worker and the fronts relaying to it."""

    def __init__(self, worker_env: dict[str, str], ca: Path | None = None) -> None:
        self.redis = RedisServer()
        self.redis.start()
        port = free_port()
        self.stub = ServerProcess("stub", stub_argv(port), port)
        self.worker_port = free_port()
        self.worker_env = worker_env
        self.ca = ca
        self.worker: ServerProcess | None = None
        self.fronts: list[ServerProcess] = []
        try:
            self.stub.wait_ready("/v1/models", timeout_s=30)
            self.start_worker()
        except BaseException:
            self.close()
            raise

    @property
    def upstream(self) -> str:
        return f"{self.stub.url}/v1"

    def start_worker(self) -> ServerProcess:
        self.worker = worker_process(
            self.worker_port, self.upstream, self.redis.url, self.worker_env
        )
        # /readyz needs no secret: the kubelet probes it.
        if self.ca is None:
            self.worker.wait_ready(timeout_s=300)
        else:
            wait_ready_over_tls(self.worker, self.ca)
        return self.worker

    def front(self, env: dict[str, str] | None = None, host: str = "127.0.0.1") -> ServerProcess:
        started = proxy(
            self.upstream,
            self.redis.url,
            {
                **COMMON,
                "DEJA_SERVER__EDGE": "true",
                "DEJA_EDGE__WORKER_URLS": f"tcp://{host}:{self.worker_port}",
                **(env or {}),
            },
        )
        self.fronts.append(started)
        started.wait_ready(timeout_s=60)
        return started

    def kill_worker(self) -> None:
        assert self.worker is not None
        self.worker.proc.send_signal(signal.SIGKILL)
        self.worker.proc.wait()

    def close(self) -> None:
        for each in self.fronts:
            each.stop()
        if self.worker is not None:
            self.worker.stop()
        self.stub.stop()
        self.redis.close()


def wait_ready_over_tls(server: ServerProcess, ca: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    url = f"https://127.0.0.1:{server.port}/readyz"

    def ready() -> bool:
        assert server.proc.poll() is None, server.output()
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError as error:
            error.close()
            return False
        except OSError:
            return False

    eventually(ready, 120.0)


def stored(front: ServerProcess, reply: Reply) -> str:
    entry = reply.headers["X-Deja-Entry"]
    eventually(lambda: admin(front, "GET", f"entries/{entry}").status == 200, 20.0)
    return entry


def in_redis(stack: SharedStack, entry: str) -> bool:
    with redis.Redis.from_url(stack.redis.url) as client:
        return any(True for _ in client.scan_iter(match=f"*:e:{entry}"))


def exact_hits(front: ServerProcess) -> int:
    hits = admin(front, "GET", "stats").body["hits"]
    return sum(int(by_match.get("exact", 0)) for by_match in hits.values())


def semantic_entries(front: ServerProcess) -> int:
    return int(admin(front, "GET", "stats").body["sizes"]["semantic_entries"])


@pytest.mark.models
def test_two_fronts_share_one_worker_and_carry_on_without_it() -> None:
    stack = SharedStack({"DEJA_SEMANTIC__ENABLED": "true"})
    try:
        one, two = stack.front(), stack.front()

        # Stored through one front, a paraphrase is a semantic hit through the other.
        first = ask(one, "Who wrote Pride and Prejudice?")
        assert first.headers["X-Deja-Cache"] == "miss"
        eventually(lambda: semantic_entries(two) == 1, 20.0)
        hit = ask(two, "Who is the author of Pride and Prejudice?")
        assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-Match"]) == ("hit", "semantic")
        assert hit.headers["X-Deja-Entry"] == first.headers["X-Deja-Entry"]
        # ... and the other way round.
        other = ask(two, "What is the boiling point of water at sea level?")
        eventually(lambda: semantic_entries(one) == 2, 20.0)
        back = ask(one, "At sea level, what is the boiling point of water?")
        assert (back.headers["X-Deja-Cache"], back.headers["X-Deja-Match"]) == ("hit", "semantic")
        assert back.headers["X-Deja-Entry"] == other.headers["X-Deja-Entry"]

        # An exact repeat is the front's own; with the worker killed, it still is.
        repeat = "What is the capital of France?"
        entry = stored(one, ask(one, repeat))
        # The fronts read it from Redis, where the worker writes it once its vector is computed
        # (the worker's own LRU-K has it before that).
        eventually(lambda: in_redis(stack, entry), 20.0)
        for front in (one, two):
            eventually(lambda f=front: ask(f, repeat).headers.get("X-Deja-Match") == "exact")
        stack.kill_worker()
        for front in (one, two):
            exact = ask(front, repeat)
            assert (exact.status, exact.headers["X-Deja-Cache"]) == (200, "hit"), (
                exact.headers,
                front.output(),
            )
            assert exact.body["choices"][0]["message"]["content"] == "Answer to: " + repeat

            # A miss goes straight upstream, marked; a stream too; /v1/models passes through.
            miss = ask(front, f"Never asked before, through {front.port}?")
            assert miss.status == 200, miss.body
            assert miss.headers["X-Deja-Cache"] == "bypass"
            assert miss.headers["X-Deja-Degraded"] == "worker-unreachable"
            assert "X-Deja-Entry" not in miss.headers  # nothing is stored without a worker
            assert miss.body["choices"][0]["message"]["content"].startswith("Answer to: Never")
            streamed = ask(front, "A stream without a worker?", stream=True)
            assert streamed.status == 200 and streamed.raw.rstrip().endswith(b"data: [DONE]")
            assert streamed.headers["X-Deja-Degraded"] == "worker-unreachable"
            models = http(front, "GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
            assert models.status == 200

            # The front stays ready (its application must not go out of service); what only a
            # worker has is a 503.
            ready = http(front, "GET", "/readyz")
            assert (ready.status, ready.body["status"]) == (200, "degraded")
            stats = admin(front, "GET", "stats")
            assert (stats.status, stats.body["error"]["code"]) == (503, "worker_unavailable")

        # A worker listening again is found by the fronts themselves.
        stack.start_worker()
        for front in (one, two):
            eventually(
                lambda f=front: (
                    ask(f, "Who is the author of Pride and Prejudice?").headers.get("X-Deja-Match")
                    == "semantic"
                ),
                60.0,
            )
        # What the fronts served meanwhile was kept and reaches the new worker's counters.
        eventually(lambda: exact_hits(one) >= 2, 10.0)
    finally:
        stack.close()


@pytest.fixture(scope="module")
def plain() -> Iterator[SharedStack]:
    stack = SharedStack({"DEJA_SEMANTIC__ENABLED": "false"})
    yield stack
    stack.close()


def test_a_front_with_another_secret_is_refused_and_says_why(plain: SharedStack) -> None:
    wrong = plain.front({"DEJA_EDGE__SHARED_SECRET": "not-the-secret-of-the-workers"})
    reply = ask(wrong, "Refused by the worker?")
    # The worker refused it: the front answers as without a worker, and logs why.
    assert (reply.status, reply.headers["X-Deja-Degraded"]) == (200, "worker-unreachable")
    assert "refused this front's edge.shared_secret" in wrong.output()
    assert plain.worker is not None
    assert "with a wrong edge.shared_secret" in plain.worker.output()
    # A client reaching the worker without any secret gets nothing but the probes.
    direct = ask(plain.worker, "Straight to the worker?")
    assert (direct.status, direct.body["error"]["code"]) == (401, "edge_secret_refused")
    assert http(plain.worker, "GET", "/healthz").status == 200
    assert http(plain.worker, "GET", "/admin/v1/stats").status == 401
    # The right secret gets the worker's own answer.
    right = plain.front()
    relayed = ask(right, "Answered by the worker?")
    assert (relayed.status, relayed.headers["X-Deja-Cache"]) == (200, "miss")
    assert "X-Deja-Degraded" not in relayed.headers


def chat_misses(worker: ServerProcess) -> int:
    """The chat misses `worker` answered, from its /metrics (open, as to the scrape)."""
    text = http(worker, "GET", "/metrics").raw.decode()
    found = re.search(r'deja_requests_total\{cache="miss",route="chat",status="200"\} (\S+)', text)
    return int(float(found.group(1))) if found else 0


def test_requests_are_spread_over_several_workers_and_one_down_is_skipped(
    plain: SharedStack,
) -> None:
    assert plain.worker is not None
    second = worker_process(
        free_port(), plain.upstream, plain.redis.url, {"DEJA_SEMANTIC__ENABLED": "false"}
    )
    try:
        second.wait_ready(timeout_s=120)
        urls = f"tcp://127.0.0.1:{plain.worker_port},tcp://127.0.0.1:{second.port}"
        front = plain.front({"DEJA_EDGE__WORKER_URLS": urls})
        before = chat_misses(plain.worker), chat_misses(second)
        for i in range(10):
            assert ask(front, f"Spread question {i}?").headers["X-Deja-Cache"] == "miss"
        after = chat_misses(plain.worker), chat_misses(second)
        # Round robin per request (the front's report, when it has one, takes a turn too).
        answered = [a - b for a, b in zip(after, before, strict=True)]
        assert sum(answered) == 10 and min(answered) >= 4, answered
        # One worker gone: the other answers everything, nothing goes upstream unmarked.
        second.proc.send_signal(signal.SIGKILL)
        second.proc.wait()
        for i in range(6):
            reply = ask(front, f"One worker left, question {i}?")
            assert (reply.status, reply.headers["X-Deja-Cache"]) == (200, "miss")
        assert chat_misses(plain.worker) - after[0] == 6
    finally:
        second.stop()


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "worker.pem", folder / "worker.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_the_relay_runs_over_tls_with_a_certificate_the_front_checks(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    (tmp_path / "other").mkdir()
    other, _ = self_signed(tmp_path / "other")
    tls = {"DEJA_EDGE__TLS_CERT": str(cert), "DEJA_EDGE__TLS_KEY": str(key)}
    stack = SharedStack({"DEJA_SEMANTIC__ENABLED": "false", **tls}, ca=cert)
    try:
        # The worker's probes are served over TLS: its /readyz was reached with its CA.
        trusted = stack.front({"DEJA_EDGE__TLS_CA": str(cert)}, host="localhost")
        question = "Over TLS?"
        miss = ask(trusted, question)
        assert (miss.status, miss.headers["X-Deja-Cache"]) == (200, "miss")
        stored(trusted, miss)
        eventually(lambda: ask(trusted, question).headers.get("X-Deja-Match") == "exact")
        # A front trusting another CA, or speaking plain HTTP, does not get through.
        for env in ({"DEJA_EDGE__TLS_CA": str(other)}, {}):
            untrusted = stack.front(env)
            reply = ask(untrusted, "Over TLS, untrusted?")
            assert (reply.status, reply.headers["X-Deja-Degraded"]) == (200, "worker-unreachable")
    finally:
        stack.close()
