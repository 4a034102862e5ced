"""Edge mode end to end: `deja serve` with `server.edge` (a front process and its worker), a real
Redis and the stub upstream, each a process of its own.

The front answers exact hits without its worker (shown by stopping the worker with SIGSTOP and
still getting the hit), relays everything else verbatim (misses, streams, errors, admin), and
what it served is counted by the worker (stats, metrics, feedback by request id). Deletions and
refreshed answers reach the front's own LRU-K through the replication stream. Each process stops
when the other is gone. With the semantic tier on, a paraphrase is matched by the worker
through the front.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest

from tests.support.blocking_http import Reply, eventually, http
from tests.support.processes import ServerProcess, proxy
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv

pytestmark = pytest.mark.redis

TOKEN = "edge-admin"
KEY = "sk-edge"
ENV = {
    "DEJA_SERVER__EDGE": "true",
    # The worker at normal priority here: these tests are about behaviour, and an idle-priority
    # worker on a machine that something else keeps busy could take seconds to store an answer.
    # The fixture with the default (idle) is `fresh_stack`.
    "DEJA_SERVER__EDGE_WORKER_IDLE": "false",
    "DEJA_SEMANTIC__ENABLED": "false",
    "DEJA_ADMIN__TOKEN": TOKEN,
    "DEJA_SERVER__ACCESS_LOG": "false",
    "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
}


def ask(server: ServerProcess, question: str, stream: bool = False, **headers: str) -> Reply:
    body = {"model": "m", "messages": [{"role": "user", "content": question}], "stream": stream}
    return http(
        server, "POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {KEY}", **headers}
    )


def admin(server: ServerProcess, method: str, path: str, payload: Any = None) -> Reply:
    return http(server, method, f"/admin/v1/{path}", payload, {"Authorization": f"Bearer {TOKEN}"})


def stored(server: ServerProcess, reply: Reply) -> str:
    """The entry a miss will store, once it is stored: the worker stores after it answers, and
    a repeat asked before that would be a miss of its own (another entry, superseding it)."""
    entry = reply.headers["X-Deja-Entry"]
    eventually(lambda: admin(server, "GET", f"entries/{entry}").status == 200, 20.0)
    return entry


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class EdgeStack:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.redis = RedisServer()
        self.redis.start()
        port = free_port()
        self.stub = ServerProcess("stub", stub_argv(port), port)
        self.edge: ServerProcess | None = None
        try:
            self.stub.wait_ready("/v1/models", timeout_s=30)
            self.edge = proxy(f"{self.stub.url}/v1", self.redis.url, {**ENV, **(env or {})})
            self.edge.wait_ready(timeout_s=300)
        except BaseException:
            self.close()
            raise

    @property
    def front(self) -> ServerProcess:
        assert self.edge is not None
        return self.edge

    def worker_pid(self) -> int:
        (pid,) = children_of(self.front.proc.pid)
        return pid

    def close(self) -> None:
        if self.edge is not None:
            self.edge.stop()
        self.stub.stop()
        self.redis.close()


@pytest.fixture(scope="module")
def stack() -> Iterator[EdgeStack]:
    s = EdgeStack()
    yield s
    s.close()


@pytest.fixture
def fresh_stack() -> Iterator[EdgeStack]:
    s = EdgeStack({"DEJA_SERVER__EDGE_WORKER_IDLE": "true"})
    yield s
    s.close()


def test_a_repeat_is_answered_by_the_front_even_while_the_worker_is_stopped(
    stack: EdgeStack,
) -> None:
    question = "What is the capital of France?"
    miss = ask(stack.front, question)
    assert miss.headers["X-Deja-Cache"] == "miss"
    entry = stored(stack.front, miss)
    eventually(lambda: ask(stack.front, question).headers.get("X-Deja-Tier") == "lru_k")
    worker = stack.worker_pid()
    os.kill(worker, signal.SIGSTOP)
    try:
        hit = ask(stack.front, question)
    finally:
        os.kill(worker, signal.SIGCONT)
    assert (hit.status, hit.headers["X-Deja-Cache"], hit.headers["X-Deja-Match"]) == (
        200,
        "hit",
        "exact",
    )
    # The front's own tiers: its LRU-K copy, or its Redis when a replication update from the
    # worker (the answer's vector attached, say) has just dropped that copy.
    assert hit.headers["X-Deja-Tier"] in ("lru_k", "redis")
    assert hit.headers["X-Deja-Entry"] == entry
    assert hit.body["choices"][0]["message"]["content"] == "Answer to: " + question
    assert hit.body["id"] != miss.body["id"] and hit.body["usage"] == miss.body["usage"]


def test_explain_reads_the_same_from_the_front_and_from_its_worker(stack: EdgeStack) -> None:
    explain = {"X-Deja-Explain": "1"}
    question = "What is the capital of Peru?"
    miss = ask(stack.front, question, **explain)  # the worker's answer, relayed verbatim
    assert miss.headers["X-Deja-Explain"] == "refused=semantic_off"
    stored(stack.front, miss)
    eventually(lambda: ask(stack.front, question).headers.get("X-Deja-Tier") == "lru_k")
    worker = stack.worker_pid()
    os.kill(worker, signal.SIGSTOP)
    try:
        hit = ask(stack.front, question, **explain)
        plain = ask(stack.front, question)
    finally:
        os.kill(worker, signal.SIGCONT)
    # The front's own tiers: its LRU-K copy, or its Redis when a replication update from the
    # worker (the answer's vector attached, say) has just dropped that copy.
    assert hit.headers["X-Deja-Tier"] in ("lru_k", "redis")
    assert hit.headers["X-Deja-Explain"] == "served=exact"
    assert "X-Deja-Explain" not in plain.headers


def test_a_streamed_miss_comes_through_the_front_and_its_repeat_is_replayed(
    stack: EdgeStack,
) -> None:
    question = "Stream the capital of Spain"
    miss = ask(stack.front, question, stream=True)
    assert miss.headers["X-Deja-Cache"] == "miss"
    assert miss.headers["Content-Type"].startswith("text/event-stream")
    events = [line for line in miss.raw.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) > 3
    stored(stack.front, miss)
    replay = ask(stack.front, question, stream=True)
    assert replay.headers["X-Deja-Cache"] == "hit"
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in replay.raw.decode().splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert text == "Answer to: " + question


def test_responses_go_through_the_front_to_the_worker_and_hit_there(stack: EdgeStack) -> None:
    # The front answers chat and completions hits only: /v1/responses is the worker's, plain
    # and streamed, its typed events relayed as they are.
    body = {"model": "m", "input": "Which river crosses Paris?"}
    headers = {"Authorization": f"Bearer {KEY}"}
    miss = http(stack.front, "POST", "/v1/responses", body, headers)
    assert miss.headers["X-Deja-Cache"] == "miss"
    stored(stack.front, miss)
    hit = http(stack.front, "POST", "/v1/responses", body, headers)
    streamed = http(stack.front, "POST", "/v1/responses", {**body, "stream": True}, headers)
    assert hit.headers["X-Deja-Cache"] == streamed.headers["X-Deja-Cache"] == "hit"
    assert hit.body["id"] == miss.body["id"]  # the upstream keeps it: its own id
    events = [e for e in streamed.raw.decode().split("\n\n") if e]
    assert events[0].startswith("event: response.created\n")
    assert events[-1].startswith("event: response.completed\n")
    completed = json.loads(events[-1].split("data: ", 1)[1])
    assert completed["response"]["output"] == miss.body["output"]


def test_what_the_front_served_is_counted_by_the_worker_and_feedback_finds_it(
    stack: EdgeStack,
) -> None:
    question = "What is the capital of Portugal?"
    stored(stack.front, ask(stack.front, question))
    before = admin(stack.front, "GET", "stats").body["requests"]["hits"]
    served = [ask(stack.front, question, **{"X-Request-Id": f"edge-req-{i}"}) for i in range(3)]
    assert all(r.headers["X-Request-Id"] == f"edge-req-{i}" for i, r in enumerate(served))
    # The report is flushed before any admin call is relayed: no waiting needed.
    assert admin(stack.front, "GET", "stats").body["requests"]["hits"] == before + 3
    metrics = http(stack.front, "GET", "/metrics").raw.decode()
    assert 'deja_requests_total{cache="hit",route="chat",status="200"}' in metrics
    feedback = admin(stack.front, "POST", "feedback", {"request_id": "edge-req-2", "signal": 1})
    assert feedback.status == 200
    assert feedback.body["entry_id"] == served[2].headers["X-Deja-Entry"]


def test_deletions_and_refreshed_answers_reach_the_fronts_copy(stack: EdgeStack) -> None:
    question = "What is the capital of Austria?"
    old = stored(stack.front, ask(stack.front, question))
    eventually(lambda: ask(stack.front, question).headers.get("X-Deja-Tier") == "lru_k")
    refreshed = ask(stack.front, question, **{"Cache-Control": "no-cache"})
    assert refreshed.headers["X-Deja-Cache"] == "bypass"  # relayed: the worker answered
    new = stored(stack.front, refreshed)
    eventually(lambda: ask(stack.front, question).headers.get("X-Deja-Entry") == new, 10.0)
    assert new != old
    assert admin(stack.front, "DELETE", f"entries/{new}").body["deleted"] is True
    eventually(lambda: ask(stack.front, question).headers["X-Deja-Cache"] == "miss", 10.0)


def test_a_new_ttl_from_feedback_reaches_the_fronts_copy(stack: EdgeStack) -> None:
    question = "What is the capital of Greece?"
    entry = stored(stack.front, ask(stack.front, question))
    eventually(lambda: ask(stack.front, question).headers.get("X-Deja-Tier") == "lru_k")
    ttl = int(ask(stack.front, question).headers["X-Deja-TTL"])
    reply = admin(stack.front, "POST", "feedback", {"entry_id": entry, "signal": "useful"})
    new_ttl = round(reply.body["ttl_s"])
    assert new_ttl > ttl
    # The update event drops the front's copy; its next lookup reads the new record.
    eventually(lambda: int(ask(stack.front, question).headers["X-Deja-TTL"]) == new_ttl, 10.0)


def test_errors_and_other_routes_read_as_they_do_without_the_front(stack: EdgeStack) -> None:
    bad = http(stack.front, "POST", "/v1/chat/completions", data=b"{not json")
    assert bad.status == 400 and bad.body["error"]["type"] == "invalid_request_error"
    wrong = http(stack.front, "GET", "/v1/chat/completions")
    assert wrong.status == 405
    unknown = http(stack.front, "GET", "/nowhere")
    assert unknown.status == 404 and unknown.body["error"]["code"] == "not_found"
    models = http(stack.front, "GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert models.status == 200 and models.headers["X-Deja-Cache"] == "bypass"
    assert http(stack.front, "GET", "/readyz").body["status"] == "ready"
    assert http(stack.front, "GET", "/healthz").body == {"status": "ok"}


def test_the_front_stops_with_an_error_when_its_worker_dies(fresh_stack: EdgeStack) -> None:
    front = fresh_stack.front.proc
    worker = fresh_stack.worker_pid()
    # By default the worker gives way to the front at once (README "Edge mode").
    assert os.sched_getscheduler(worker) == os.SCHED_IDLE
    assert os.sched_getscheduler(front.pid) == os.SCHED_OTHER
    assert os.sched_getaffinity(worker) == os.sched_getaffinity(front.pid)
    os.kill(worker, signal.SIGKILL)
    assert front.wait(timeout=20) == 1


def test_the_worker_stops_when_its_front_dies(fresh_stack: EdgeStack) -> None:
    worker = fresh_stack.worker_pid()
    os.kill(fresh_stack.front.proc.pid, signal.SIGKILL)
    fresh_stack.front.proc.wait()
    eventually(lambda: not alive(worker), 20.0)


def semantic_entries(server: ServerProcess) -> int:
    return int(admin(server, "GET", "stats").body["sizes"]["semantic_entries"])


@pytest.mark.models
def test_a_paraphrase_is_a_semantic_hit_through_the_front() -> None:
    stack = EdgeStack({"DEJA_SEMANTIC__ENABLED": "true"})
    try:
        first = ask(stack.front, "Who wrote Pride and Prejudice?")
        assert first.headers["X-Deja-Cache"] == "miss"
        eventually(lambda: semantic_entries(stack.front) == 1, 10.0)
        hit = ask(stack.front, "Who is the author of Pride and Prejudice?")
        # The front looked for an exact match, found none and relayed: the worker matched it.
        assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-Match"]) == ("hit", "semantic")
        assert hit.headers["X-Deja-Entry"] == first.headers["X-Deja-Entry"]
        assert float(hit.headers["X-Deja-Similarity"]) > 0.9
        stats = admin(stack.front, "GET", "stats").body
        assert stats["hits"]["semantic"] == {"semantic": 1}
    finally:
        stack.close()


def test_embeddings_and_uploads_pass_through_the_front(stack: EdgeStack) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "embedder", "input": ["edge one", "edge two"], "encoding_format": "base64"}
    first = http(stack.front, "POST", "/v1/embeddings", body, headers=auth)
    body["input"] = ["edge one", "edge two", "edge three"]
    second = http(stack.front, "POST", "/v1/embeddings", body, headers=auth)
    assert first.headers["X-Deja-Inputs-Cached"] == "0/2"
    assert (second.headers["X-Deja-Cache"], second.headers["X-Deja-Inputs-Cached"]) == (
        "partial",
        "2/3",
    )
    assert second.body["data"][:2] == first.body["data"]
    # A body streamed on to the worker, and from it to the upstream.
    upload = os.urandom(8 * 1024 * 1024)
    sent = http(stack.front, "POST", "/v1/files", headers=auth, data=upload)
    assert sent.status == 200 and sent.body["bytes"] == len(upload)


def test_a_streamed_upload_past_the_limit_gets_413_from_the_front() -> None:
    limit = 1024 * 1024
    s = EdgeStack({"DEJA_SERVER__MAX_PASSTHROUGH_BYTES": str(limit)})
    try:
        connection = HTTPConnection("127.0.0.1", s.front.port, timeout=30)
        try:
            chunks = (b"x" * 65536 for _ in range(64))  # 4 MiB, no Content-Length
            connection.request(
                "POST",
                "/v1/files",
                body=chunks,
                headers={"Authorization": f"Bearer {KEY}"},
                encode_chunked=True,
            )
            reply = connection.getresponse()
            error = json.loads(reply.read())["error"]
        finally:
            connection.close()
        assert reply.status == 413
        assert str(limit) in error["message"]
    finally:
        s.close()
