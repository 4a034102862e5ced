"""Two real `deja serve` processes sharing one real Redis, or one real six-node Redis Cluster
(every test runs on both), in front of the stub upstream (a process too): what one replica
learns or is told, the other knows.

Exact tier (semantic off): entries, feedback (eviction and new TTLs), deletion, invalidation,
refreshed answers and warm-up through A (or B) reach the other. Semantic tier (real MiniLM +
spaCy in both): an entry stored through A is a semantic hit on B within a second, warm-up
through A makes B hit paraphrases, and a complaint about a semantic hit raises that entry's
threshold on both.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from normalize.keys.request import PARTITION_TAG_CHARS
from tests.support.blocking_http import Reply, eventually, http
from tests.support.processes import ServerProcess, proxy
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv
from tests.support.warmup_lines import warm_up_line

pytestmark = pytest.mark.redis

TOKEN = "replica-admin"
FAST_ENV = {
    "DEJA_ADMIN__TOKEN": TOKEN,
    "DEJA_TTL__JITTER_MIN": "1",
    "DEJA_TTL__JITTER_MAX": "1",
    "DEJA_SERVER__ACCESS_LOG": "false",
    "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
}
# The tenant of the questions asked and warmed up here.
KEY = "sk-replicas"


def ask(server: ServerProcess, question: str, key: str = KEY, **headers: str) -> Reply:
    body = {"model": "m", "messages": [{"role": "user", "content": question}]}
    return http(
        server, "POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {key}", **headers}
    )


def admin(
    server: ServerProcess, method: str, path: str, payload: Any = None, data: bytes | None = None
) -> Reply:
    return http(
        server, method, f"/admin/v1/{path}", payload, {"Authorization": f"Bearer {TOKEN}"}, data
    )


def stored(server: ServerProcess, question: str, **kwargs: Any) -> str:
    reply = ask(server, question, **kwargs)
    assert reply.headers["X-Deja-Cache"] == "miss", reply.headers
    entry_id = reply.headers["X-Deja-Entry"]
    eventually(lambda: admin(server, "GET", f"entries/{entry_id}").status == 200)
    return entry_id


# Where the replicas keep their shared state: one redis-server, or a Redis Cluster.
BACKENDS = ["redis", "redis_cluster"]


class Stack:
    def __init__(self, env: dict[str, str], backend: str = "redis") -> None:
        self.redis: RedisServer | RedisClusterNodes = (
            RedisClusterNodes() if backend == "redis_cluster" else RedisServer()
        )
        # What a replica of this stack runs with (the cluster flag where it is one).
        self.env = {**env, "DEJA_REDIS__CLUSTER": str(backend == "redis_cluster").lower()}
        self.replicas: list[ServerProcess] = []
        self.stub: ServerProcess | None = None
        try:
            self.redis.start()
            port = free_port()
            self.stub = ServerProcess("stub", stub_argv(port), port)
            self.stub.wait_ready("/v1/models", timeout_s=30)
            # One after the other: two replicas loading their models at once on a small
            # machine each take twice as long.
            for _ in range(2):
                self.replicas.append(self.replica())
                self.replicas[-1].wait_ready(timeout_s=300)
        except BaseException:
            self.close()
            raise
        self.a, self.b = self.replicas

    @property
    def upstream(self) -> str:
        assert self.stub is not None
        return f"{self.stub.url}/v1"

    def stored(self, server: ServerProcess, question: str, **kwargs: Any) -> str:
        """`stored`, and waited for until its record is in Redis: the replica that answered
        holds it at once, Redis a moment later (the first write to a cluster node also
        connects to it), and a test asking the other replica before then would see a miss."""
        entry_id = stored(server, question, **kwargs)
        record_key = f"deja:v1:{{{entry_id[:PARTITION_TAG_CHARS]}}}:e:{entry_id}"
        cluster = isinstance(self.redis, RedisClusterNodes)
        client = (redis.RedisCluster if cluster else redis.Redis).from_url(self.redis.url)
        try:
            eventually(lambda: bool(client.exists(record_key)), 2.0)
        finally:
            client.close()
        return entry_id

    def replica(self) -> ServerProcess:
        """One more `deja serve` on this stack's upstream and Redis (not waited for)."""
        return proxy(self.upstream, self.redis.url, self.env)

    def close(self) -> None:
        for replica in self.replicas:
            replica.stop()
        if self.stub is not None:
            self.stub.stop()
        self.redis.close()


@pytest.fixture(scope="module", params=BACKENDS)
def exact(request: pytest.FixtureRequest) -> Iterator[Stack]:
    stack = Stack({**FAST_ENV, "DEJA_SEMANTIC__ENABLED": "false"}, request.param)
    yield stack
    stack.close()


# --- exact tier ------------------------------------------------------------------------------


def test_an_entry_stored_through_a_is_a_hit_on_b(exact: Stack) -> None:
    entry_id = exact.stored(exact.a, "What is the capital of France?")
    hit = ask(exact.b, "What is the capital of France?")
    assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-Tier"]) == ("hit", "redis")
    assert hit.headers["X-Deja-Entry"] == entry_id
    assert (
        hit.body["choices"][0]["message"]["content"] == "Answer to: What is the capital of France?"
    )
    again = ask(exact.b, "What is the capital of France?")
    assert again.headers["X-Deja-Tier"] == "lru_k"  # filled back into B's own LRU-K


def test_feedback_evicting_on_a_makes_b_miss(exact: Stack) -> None:
    question = "What is the capital of Spain?"
    entry_id = exact.stored(exact.a, question)
    assert ask(exact.b, question).headers["X-Deja-Cache"] == "hit"
    assert ask(exact.b, question).headers["X-Deja-Tier"] == "lru_k"  # B holds a local copy
    for signal, evicted in (("irrelevant", False), ("irrelevant", True)):
        reply = admin(exact.a, "POST", "feedback", {"entry_id": entry_id, "signal": signal})
        assert (reply.status, reply.body["evicted"]) == (200, evicted)
    eventually(lambda: admin(exact.b, "GET", f"entries/{entry_id}").status == 404, 2.0)
    assert ask(exact.b, question).headers["X-Deja-Cache"] == "miss"


def test_feedback_retiming_on_a_shows_the_new_ttl_on_b(exact: Stack) -> None:
    question = "What is the capital of Portugal?"
    entry_id = exact.stored(exact.a, question)
    assert ask(exact.b, question).headers["X-Deja-TTL"] == "300"
    assert ask(exact.b, question).headers["X-Deja-Tier"] == "lru_k"
    reply = admin(exact.a, "POST", "feedback", {"entry_id": entry_id, "signal": "useful"})
    assert reply.body["ttl_s"] == 390.0
    eventually(lambda: ask(exact.b, question).headers["X-Deja-TTL"] == "390", 2.0)
    hit = ask(exact.b, question)
    assert (hit.headers["X-Deja-Tier"], hit.headers["X-Deja-Entry"]) == ("lru_k", entry_id)


def test_deletion_and_invalidation_on_a_reach_b(exact: Stack) -> None:
    doomed = exact.stored(exact.a, "What is the capital of Italy?")
    tenant = [exact.stored(exact.a, f"Capital number {i}?", key="sk-doomed") for i in range(2)]
    survivor = exact.stored(exact.a, "What is the capital of Greece?")
    for question, key in (
        ("What is the capital of Italy?", "sk-replicas"),
        ("Capital number 0?", "sk-doomed"),
        ("Capital number 1?", "sk-doomed"),
    ):
        ask(exact.b, question, key=key)
        assert ask(exact.b, question, key=key).headers["X-Deja-Tier"] == "lru_k"

    assert admin(exact.a, "DELETE", f"entries/{doomed}").body == {
        "entry_id": doomed,
        "deleted": True,
    }
    assert admin(exact.a, "POST", "invalidate", {"tenant_key": "sk-doomed"}).body == {
        "invalidated": 2
    }
    for entry_id in (doomed, *tenant):
        path = f"entries/{entry_id}"
        eventually(lambda path=path: admin(exact.b, "GET", path).status == 404, 2.0)
    assert ask(exact.b, "What is the capital of Italy?").headers["X-Deja-Cache"] == "miss"
    assert ask(exact.b, "Capital number 1?", key="sk-doomed").headers["X-Deja-Cache"] == "miss"
    assert ask(exact.b, "What is the capital of Greece?").headers["X-Deja-Entry"] == survivor

    assert admin(exact.a, "POST", "invalidate", {"all": True}).status == 200
    eventually(
        lambda: ask(exact.b, "What is the capital of Greece?").headers["X-Deja-Cache"] == "miss",
        2.0,
    )


def test_an_answer_refreshed_through_b_replaces_the_copy_a_holds(exact: Stack) -> None:
    question = "What is the capital of Austria?"
    old = exact.stored(exact.a, question)
    assert ask(exact.a, question).headers["X-Deja-Tier"] == "lru_k"  # A holds a local copy
    fresh = ask(exact.b, question, **{"Cache-Control": "no-cache"})
    assert fresh.headers["X-Deja-Cache"] == "bypass"  # not looked up, answered and stored
    new = fresh.headers["X-Deja-Entry"]
    assert new != old
    # Before, A kept serving the superseded answer from its LRU-K until it expired.
    eventually(lambda: ask(exact.a, question).headers["X-Deja-Entry"] == new, 2.0)
    for replica in (exact.a, exact.b):
        assert admin(replica, "GET", f"entries/{old}").status == 404


def test_warm_up_through_a_makes_b_hit(exact: Stack) -> None:
    data = b"\n".join(
        warm_up_line(f"Warm question {i}?", f"Warm answer {i}.", KEY) for i in range(3)
    )
    reply = admin(exact.a, "POST", "warmup", data=data)
    lines = [json.loads(raw) for raw in reply.body.splitlines()]
    assert lines[-1] == {"summary": {"lines": 3, "stored": 3, "failed": 0}}
    for i in range(3):
        hit = ask(exact.b, f"Warm question {i}?")
        assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-Entry"]) == (
            "hit",
            lines[i]["entry_id"],
        )
        assert hit.body["choices"][0]["message"]["content"] == f"Warm answer {i}."


# --- semantic tier -----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def semantic(request: pytest.FixtureRequest) -> Iterator[Stack]:
    stack = Stack({**FAST_ENV, "DEJA_SEMANTIC__ENABLED": "true"}, request.param)
    yield stack
    stack.close()


def semantic_entries(server: ServerProcess) -> int:
    return int(admin(server, "GET", "stats").body["sizes"]["semantic_entries"])


def partition_state(server: ServerProcess, tag: str) -> str:
    """ "held", "loading" or "not held": the partition's state in the replica's semantic index,
    from /readyz."""
    body = http(server, "GET", f"/readyz?partition={tag}").body
    return str(body["semantic"]["partitions"]["partition"]["state"])


def hold(server: ServerProcess, question: str, key: str = KEY) -> str:
    """Ask `question` (any answer does: an exact hit too) so that the replica loads the
    question's partition, and wait until it holds it; returns the partition's tag. A replica
    indexes another's entries only in partitions it holds (README, "Partitions on demand")."""
    tag = ask(server, question, key=key).headers["X-Deja-Entry"][:PARTITION_TAG_CHARS]
    eventually(lambda: partition_state(server, tag) == "held", 10.0)
    return tag


@pytest.mark.models
def test_an_entry_stored_through_a_is_a_semantic_hit_on_b_within_a_second(semantic: Stack) -> None:
    hold(semantic.b, "Which partition is this?")
    before = semantic_entries(semantic.b)
    stored(semantic.a, "Who wrote Pride and Prejudice?")
    seconds = eventually(lambda: semantic_entries(semantic.b) > before, 5.0)
    assert seconds < 1.0, f"B indexed A's entry after {seconds:.2f} s"
    hit = ask(semantic.b, "Who is the author of Pride and Prejudice?")
    assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-Match"]) == ("hit", "semantic"), (
        hit.headers
    )
    assert (
        hit.body["choices"][0]["message"]["content"] == "Answer to: Who wrote Pride and Prejudice?"
    )


@pytest.mark.models
def test_warm_up_through_a_makes_b_hit_paraphrases(semantic: Stack) -> None:
    hold(semantic.b, "Which partition is this?")
    before = semantic_entries(semantic.b)
    data = warm_up_line(
        "What is the boiling point of water at sea level?", "100 degrees Celsius.", KEY
    )
    reply = admin(semantic.a, "POST", "warmup", data=data)
    assert json.loads(reply.body.splitlines()[-1])["summary"]["stored"] == 1
    eventually(lambda: semantic_entries(semantic.b) > before, 2.0)
    hit = ask(semantic.b, "At sea level, what's the boiling point of water?")
    assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-Match"]) == ("hit", "semantic"), (
        hit.headers
    )
    assert hit.body["choices"][0]["message"]["content"] == "100 degrees Celsius."


@pytest.mark.models
def test_a_complaint_about_a_semantic_hit_raises_its_threshold_everywhere(semantic: Stack) -> None:
    hold(semantic.b, "Which partition is this?", key="sk-complaints")
    entry_id = stored(semantic.a, "Who wrote Moby Dick?", key="sk-complaints")
    eventually(lambda: admin(semantic.b, "GET", f"entries/{entry_id}").status == 200, 2.0)
    time.sleep(0.5)  # B indexes it from the stream
    paraphrase = "Who is the author of Moby Dick?"
    hit = ask(semantic.b, paraphrase, key="sk-complaints", **{"X-Request-Id": "complaint-1"})
    assert (hit.headers["X-Deja-Cache"], hit.headers["X-Deja-Match"]) == ("hit", "semantic"), (
        hit.headers
    )
    similarity = float(hit.headers["X-Deja-Similarity"])
    before = admin(semantic.b, "GET", "stats").body["false_hits"]

    reply = admin(
        semantic.b, "POST", "feedback", {"request_id": "complaint-1", "signal": "irrelevant"}
    )
    assert reply.status == 200 and not reply.body["evicted"]
    assert reply.body["threshold"] == pytest.approx(similarity + 0.01, abs=1e-4)
    after = admin(semantic.b, "GET", "stats").body["false_hits"]
    assert after["complaints"] == before["complaints"] + 1
    # Neither the threshold every tenant shares nor the estimate moves.
    assert after["global_threshold"] == before["global_threshold"]
    assert after["verified"] == before["verified"]

    # The stream carries the raised floor to A: there too the paraphrase no longer reaches the
    # entry (it misses and gets an entry of its own, which B then finds by its exact key).
    eventually(
        lambda: (
            admin(semantic.a, "GET", f"entries/{entry_id}").body["threshold"]
            == pytest.approx(similarity + 0.01, abs=1e-4)
        ),
        5.0,
    )
    own = stored(semantic.a, paraphrase, key="sk-complaints")
    # A holds it at once; Redis gets it with its answer embedding, a few ms later.
    eventually(lambda: admin(semantic.b, "GET", f"entries/{own}").status == 200, 2.0)
    again = ask(semantic.b, paraphrase, key="sk-complaints")
    assert (again.headers["X-Deja-Match"], again.headers["X-Deja-Entry"]) == ("exact", own)
    # The entry itself still answers its own question.
    assert (
        ask(semantic.b, "Who wrote Moby Dick?", key="sk-complaints").headers["X-Deja-Entry"]
        == entry_id
    )


@pytest.mark.models
def test_a_starting_replica_waits_for_the_models_then_loads_each_partition_when_asked(
    semantic: Stack,
) -> None:
    """Entries warmed before the models are in would get no embedding: 503 until /readyz. Once
    ready, the new replica holds no partition; each question asked there (an exact hit, served
    from Redis at once) loads its partition, which then holds every entry Redis has in it (on a
    cluster, wherever its slot lives)."""
    for i in range(6):
        stored(semantic.a, f"Which partition is number {i}?", key=f"sk-rebuild-{i}")
    starting = semantic.replica()
    try:
        starting.wait_ready("/healthz", timeout_s=60)
        reply = admin(starting, "POST", "warmup", data=warm_up_line("Early?", "Too early.", KEY))
        if http(starting, "GET", "/readyz").status != 200:  # still loading, as expected
            assert reply.status == 503, reply.body
            assert reply.body["error"]["code"] == "not_ready"
        starting.wait_ready(timeout_s=300)
        tags = [
            ask(starting, f"Which partition is number {i}?", key=f"sk-rebuild-{i}").headers[
                "X-Deja-Entry"
            ][:PARTITION_TAG_CHARS]
            for i in range(6)
        ]
        assert len(set(tags)) == 6
        for tag in tags:  # each loads once asked about (an exact hit, from Redis, meanwhile)
            eventually(lambda tag=tag: partition_state(starting, tag) == "held", 10.0)
        eventually(lambda: semantic_entries(starting) >= 6, 5.0)
    finally:
        starting.stop()
