"""The semantic tier end to end: real spaCy, MiniLM, FAISS and Redis, through real proxies.

Paraphrases hit; questions that differ in negation, numbers, entities or roles never do; the
same question in another context (history, system prompt, model, tenant) never does; prompts
the English pipeline cannot read match exactly only; entries expire; a replica that starts
loads a partition's entries from Redis when first asked about it, and replicas see each other's
entries through the stream in the partitions they hold.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from openai import OpenAI

from tests.support.processes import ServerProcess, proxy
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv
from tests.support.warmup_lines import warm_up_line

pytestmark = [pytest.mark.models, pytest.mark.redis]

ADMIN_TOKEN = "semantic-admin"


class Stack:
    def __init__(self, redis: RedisServer, stub: ServerProcess, a: ServerProcess) -> None:
        self.redis, self.stub, self.a = redis, stub, a


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    redis = RedisServer()
    redis.start()
    port = free_port()
    stub = ServerProcess("stub", stub_argv(port), port)
    a: ServerProcess | None = None
    try:
        stub.wait_ready("/v1/models", timeout_s=30)
        a = proxy(
            f"{stub.url}/v1",
            redis.url,
            env={"DEJA_SEMANTIC__ENABLED": "true", "DEJA_ADMIN__TOKEN": ADMIN_TOKEN},
        )
        a.wait_ready(timeout_s=300)
        yield Stack(redis, stub, a)
    finally:
        if a is not None:
            a.stop()
        stub.stop()
        redis.close()


def ask(
    server: ServerProcess,
    question: str,
    *,
    history: list[dict[str, Any]] | None = None,
    model: str = "m",
    key: str = "sk-tenant-1",
    headers: dict[str, str] | None = None,
) -> tuple[dict[str, str], str]:
    body = {"model": model, "messages": [*(history or []), {"role": "user", "content": question}]}
    request = urllib.request.Request(
        f"{server.url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {key}",
            **(headers or {}),
        },
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        payload = json.loads(response.read())
        return dict(response.headers), payload["choices"][0]["message"]["content"]


def first_then(
    server: ServerProcess, first: str, second: str, **kwargs: Any
) -> tuple[dict[str, str], str]:
    headers, _ = ask(server, first, **kwargs)
    assert headers["X-Deja-Cache"] == "miss", f"{first!r} was not new"
    return ask(server, second, **kwargs)


@pytest.mark.parametrize(
    "first,second",
    [
        ("How do I reset my password?", "How can I reset my password?"),
        ("Who wrote Pride and Prejudice?", "Who is the author of Pride and Prejudice?"),
        (
            "What is the boiling point of water at sea level?",
            "At sea level, what's the boiling point of water?",
        ),
    ],
)
def test_paraphrases_hit(stack: Stack, first: str, second: str) -> None:
    headers, answer = first_then(stack.a, first, second)
    assert headers["X-Deja-Cache"] == "hit", headers
    assert headers["X-Deja-Match"] in ("semantic", "lemma")
    assert answer == f"Answer to: {first}"
    if headers["X-Deja-Match"] == "semantic":
        assert headers["X-Deja-Tier"] == "semantic"
        assert 0 < float(headers["X-Deja-Similarity"]) <= 1


@pytest.mark.parametrize(
    "first,second",
    [
        (
            "Is it safe to take ibuprofen with alcohol?",
            "Is it not safe to take ibuprofen with alcohol?",
        ),
        ("Convert 100 USD to EUR", "Convert 100 EUR to USD"),
        ("Convert 100 USD to EUR", "Convert 250 USD to EUR"),
        ("Did Germany beat Brazil in 2014?", "Did Brazil beat Germany in 2014?"),
        ("What is the population of France?", "What is the population of Spain?"),
        (
            "How do I enable two-factor authentication?",
            "How do I disable two-factor authentication?",
        ),
    ],
)
def test_different_questions_never_hit(stack: Stack, first: str, second: str) -> None:
    # A tenant of its own per case, so each pair starts from an empty cache.
    headers, answer = first_then(stack.a, first, second, key=f"sk-never-{first}-{second}")
    assert headers["X-Deja-Cache"] == "miss", (first, second, headers)
    assert answer == f"Answer to: {second}"


def test_chinese_prompts_match_exactly_only(stack: Stack) -> None:
    headers, _ = first_then(stack.a, "把美元换成欧元", "把欧元换成美元", key="sk-zh")
    assert headers["X-Deja-Cache"] == "miss"
    headers, _ = ask(stack.a, "把美元换成欧元", key="sk-zh")
    assert headers["X-Deja-Cache"] == "hit" and headers["X-Deja-Match"] == "exact"


@pytest.mark.parametrize(
    "variant",
    [
        {"history": [{"role": "system", "content": "Answer in French."}]},
        {
            "history": [
                {"role": "user", "content": "I use Linux."},
                {"role": "assistant", "content": "OK."},
            ]
        },
        {"model": "another-model"},
        {"key": "sk-another-tenant"},
    ],
)
def test_the_same_question_in_another_context_never_hits(
    stack: Stack, variant: dict[str, Any]
) -> None:
    question = "How do I clear my browser cache?"
    ask(stack.a, question, key="sk-context")
    kwargs: dict[str, Any] = {"key": "sk-context", **variant}
    headers, _ = ask(stack.a, "How can I clear my browser cache?", **kwargs)
    assert headers["X-Deja-Cache"] == "miss", variant


def test_expired_entries_do_not_hit(stack: Stack) -> None:
    ask(stack.a, "What time zone is Tokyo in?", key="sk-ttl", headers={"X-Deja-Store-TTL": "1"})
    time.sleep(1.3)
    headers, _ = ask(stack.a, "Which time zone is Tokyo in?", key="sk-ttl")
    assert headers["X-Deja-Cache"] == "miss"


def test_a_new_replica_loads_a_partition_when_asked_and_follows_the_stream(stack: Stack) -> None:
    ask(stack.a, "How do I change my shipping address?", key="sk-replica")
    b = proxy(f"{stack.stub.url}/v1", stack.redis.url, env={"DEJA_SEMANTIC__ENABLED": "true"})
    try:
        b.wait_ready(timeout_s=300)
        # The first question in the partition (an exact hit, from Redis) loads it on B; once
        # /readyz lists it as held, B's index holds what A stored there.
        headers, _ = ask(b, "How do I change my shipping address?", key="sk-replica")
        assert (headers["X-Deja-Cache"], headers["X-Deja-Match"]) == ("hit", "exact")
        wait_held(b, headers["X-Deja-Entry"][:16])
        headers, answer = ask(b, "How can I change my shipping address?", key="sk-replica")
        assert headers["X-Deja-Cache"] == "hit" and headers["X-Deja-Match"] in ("semantic", "lemma")
        assert answer == "Answer to: How do I change my shipping address?"
        # Stored through A while B runs: B sees it through the stream within a second.
        ask(stack.a, "How do I cancel my subscription?", key="sk-replica")
        time.sleep(1.0)
        headers, _ = ask(b, "How can I cancel my subscription?", key="sk-replica")
        assert headers["X-Deja-Cache"] == "hit" and headers["X-Deja-Tier"] in ("semantic", "redis")
    finally:
        b.stop()


def wait_held(server: ServerProcess, tag: str, timeout_s: float = 10.0) -> None:
    """Until the replica's /readyz lists the partition with this tag as held (loaded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        url = f"{server.url}/readyz?partition={tag}"
        with urllib.request.urlopen(url, timeout=10) as response:
            partitions = json.loads(response.read())["semantic"]["partitions"]
        if partitions["partition"]["state"] == "held":
            return
        assert time.monotonic() < deadline, f"partition {tag} not loaded: {partitions}"
        time.sleep(0.05)


def warm_up(server: ServerProcess, key: str, answers: dict[str, str]) -> None:
    lines = [warm_up_line(question, answer, key) for question, answer in answers.items()]
    request = urllib.request.Request(
        f"{server.url}/admin/v1/warmup",
        data=b"\n".join(lines),
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/x-ndjson"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        summary = json.loads(response.read().splitlines()[-1])["summary"]
    assert summary["stored"] == len(answers), summary


CHANGE = "To change your PIN, open Settings, then Card, then Change PIN."
LEMMA_TWIN = "How do I reset my PIN?"


@pytest.mark.parametrize(
    "query,match", [("How to reset my PIN?", "semantic"), (LEMMA_TWIN, "lemma")]
)
@pytest.mark.parametrize(
    "second_answer,hits",
    [
        ("Your PIN is blocked after three wrong tries; unblock it at any of our ATMs.", False),
        ("To change your PIN, open Settings, then Card, and then Change PIN.", True),
    ],
)
def test_a_hit_a_neighbour_contradicts_is_refused(
    stack: Stack, query: str, match: str, second_answer: str, hits: bool
) -> None:
    # Both cached questions pass threshold and guards for either query (cosines 0.976-0.996);
    # when they were answered differently, neither answer is served, whether the query matched
    # by meaning or by lemma key ("How do I…" and "How can I reset my PIN?" share one).
    key = f"sk-answers-{hits}-{match}"
    warm_up(
        stack.a,
        key,
        {"How can I reset my PIN?": CHANGE, "How do I go about resetting my PIN?": second_answer},
    )
    headers, answer = ask(stack.a, query, key=key)
    if hits:
        assert (headers["X-Deja-Cache"], headers["X-Deja-Match"]) == ("hit", match)
        assert answer == CHANGE
    else:
        assert headers["X-Deja-Cache"] == "miss", headers
        assert answer == f"Answer to: {query}"


def test_a_stored_answer_gets_its_vector_in_redis(stack: Stack) -> None:
    headers, _ = ask(stack.a, "How long does a bank transfer take?", key="sk-answer-vector")
    entry_id = headers["X-Deja-Entry"]
    with redis.Redis.from_url(stack.redis.url) as client:
        # The entry is stored after the answer went out, and its answer vector just after that.
        records: list[bytes] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            records = [k for k in client.keys("*") if k.endswith(f":e:{entry_id}".encode())]
            if records and client.hexists(records[0], "w"):
                break
            time.sleep(0.05)
        assert len(records) == 1
        assert len(client.hget(records[0], "w") or b"") == 384 * 4
        assert client.hget(records[0], "v") is not None


def test_a_failed_verification_stores_the_fresh_answer_for_its_prompt(stack: Stack) -> None:
    # Its own proxy (no Redis) verifying every semantic hit, so the module's shared state and
    # thresholds stay as they are.
    checker = proxy(
        f"{stack.stub.url}/v1",
        env={
            "DEJA_SEMANTIC__ENABLED": "true",
            "DEJA_ADMIN__TOKEN": ADMIN_TOKEN,
            "DEJA_VERIFY__SAMPLE_SHARE": "1.0",
        },
    )
    try:
        checker.wait_ready(timeout_s=300)
        warm_up(checker, "sk-verify", {"How can I reset my PIN?": CHANGE})
        headers, answer = ask(checker, "How to reset my PIN?", key="sk-verify")
        assert (headers["X-Deja-Match"], answer) == ("semantic", CHANGE)
        # The stub upstream answers "Answer to: …", which disagrees with CHANGE: the fresh
        # answer is stored for this prompt (without it, the raised floor would make the repeat
        # a miss), and the repeat hits it exactly.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and false_hits(checker)["fresh_answers_kept"] < 1:
            time.sleep(0.05)
        assert false_hits(checker)["wrong"] == 1
        headers, answer = ask(checker, "How to reset my PIN?", key="sk-verify")
        assert (headers["X-Deja-Cache"], headers["X-Deja-Match"]) == ("hit", "exact")
        assert answer == "Answer to: How to reset my PIN?"
    finally:
        checker.stop()


def test_a_lemma_hit_is_verified_into_its_own_estimate_and_lemma_hits_stop(stack: Stack) -> None:
    # Its own proxy verifying every hit, as above.
    checker = proxy(
        f"{stack.stub.url}/v1",
        env={
            "DEJA_SEMANTIC__ENABLED": "true",
            "DEJA_ADMIN__TOKEN": ADMIN_TOKEN,
            "DEJA_VERIFY__SAMPLE_SHARE": "1.0",
        },
    )
    try:
        checker.wait_ready(timeout_s=300)
        warm_up(checker, "sk-verify-lemma", {"How can I reset my PIN?": CHANGE})
        headers, answer = ask(checker, LEMMA_TWIN, key="sk-verify-lemma")
        assert (headers["X-Deja-Match"], answer) == ("lemma", CHANGE)
        # The stub's "Answer to: …" disagrees: one wrong of one verified lemma hit puts the
        # interval above 1%, so lemma hits are off; the semantic estimate saw nothing.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and false_hits(checker, "false_hits_lemma")["serving"]:
            time.sleep(0.05)
        lemma = false_hits(checker, "false_hits_lemma")
        assert (lemma["verified"], lemma["wrong"], lemma["serving"]) == (1, 1, False)
        assert false_hits(checker)["verified"] == 0
        with urllib.request.urlopen(f"{checker.url}/metrics", timeout=10) as response:
            metrics = response.read().decode().splitlines()
        assert "deja_lemma_hits_on 0.0" in metrics
    finally:
        checker.stop()


def false_hits(server: ServerProcess, section: str = "false_hits") -> dict[str, Any]:
    request = urllib.request.Request(
        f"{server.url}/admin/v1/stats", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        stats: dict[str, Any] = json.loads(response.read())[section]
        return stats


EXPLAIN = {"X-Deja-Explain": "1"}


def explained(header: str) -> dict[str, str]:
    """`similarity=0.8731; threshold=0.9000; refused=roles` as a dict."""
    return dict(part.split("=", 1) for part in header.split("; "))


def test_explain_names_the_guard_that_refused_a_paraphrase(stack: Stack) -> None:
    key = "sk-explain-negation"
    ask(stack.a, "Is it safe to take ibuprofen with alcohol?", key=key)
    headers, _ = ask(
        stack.a, "Is it not safe to take ibuprofen with alcohol?", key=key, headers=EXPLAIN
    )
    assert headers["X-Deja-Cache"] == "miss"
    explanation = explained(headers["X-Deja-Explain"])
    assert explanation["refused"] == "negation", explanation
    assert float(explanation["similarity"]) >= float(explanation["threshold"])


def test_explain_shows_a_near_miss_below_its_threshold(stack: Stack) -> None:
    key = "sk-explain-near"
    ask(stack.a, "How do I reset my password?", key=key)
    headers, _ = ask(stack.a, "How do I choose a strong password?", key=key, headers=EXPLAIN)
    assert headers["X-Deja-Cache"] == "miss"
    explanation = explained(headers["X-Deja-Explain"])
    assert "refused" not in explanation and "served" not in explanation, explanation
    assert 0 < float(explanation["similarity"]) < float(explanation["threshold"])


def test_explain_says_a_chinese_prompt_was_never_compared(stack: Stack) -> None:
    headers, _ = ask(stack.a, "这个药安全吗？", key="sk-explain-zh", headers=EXPLAIN)
    assert headers["X-Deja-Cache"] == "miss"
    assert headers["X-Deja-Explain"] == "refused=language"


def test_explain_on_hits_says_how_they_were_served_and_only_when_asked(stack: Stack) -> None:
    key = "sk-explain-hit"
    headers, _ = ask(stack.a, "How do I update my billing address?", key=key)
    assert "X-Deja-Explain" not in headers
    headers, _ = ask(stack.a, "How do I update my billing address?", key=key, headers=EXPLAIN)
    assert headers["X-Deja-Cache"] == "hit" and headers["X-Deja-Explain"] == "served=exact"
    headers, _ = ask(stack.a, "How can I update my billing address?", key=key)
    assert headers["X-Deja-Cache"] == "hit" and "X-Deja-Explain" not in headers
    headers, _ = ask(stack.a, "How can I update my billing address?", key=key, headers=EXPLAIN)
    explanation = explained(headers["X-Deja-Explain"])
    assert explanation["served"] == headers["X-Deja-Match"]
    if headers["X-Deja-Match"] == "semantic":
        assert float(explanation["similarity"]) >= float(explanation["threshold"])


def test_responses_paraphrases_hit_with_the_stored_response(stack: Stack) -> None:
    # /v1/responses goes through the same tiers: a paraphrase of the last user message hits,
    # plain and streamed, and a store:true hit carries the stored response's own id, which the
    # upstream can continue from.
    first = "How do I change my account password?"
    with OpenAI(base_url=f"{stack.a.url}/v1", api_key="sk-responses", max_retries=0) as client:
        responses = client.responses.with_raw_response
        miss = responses.create(model="m", input=first)
        hit = responses.create(model="m", input="How can I change my account password?")
        streamed = responses.create(
            model="m", input="How can I change my account password?", stream=True
        )
        events = list(streamed.parse())
        other = responses.create(model="m", input="How do I delete my account?")
        after = client.responses.create(
            model="m", input="Thanks", previous_response_id=hit.parse().id
        )
    assert miss.headers["X-Deja-Cache"] == "miss"
    assert hit.headers["X-Deja-Cache"] == "hit", dict(hit.headers)
    assert hit.headers["X-Deja-Match"] in ("semantic", "lemma")
    assert hit.parse().output_text == f"Answer to: {first}"
    assert hit.parse().id == miss.parse().id
    assert streamed.headers["X-Deja-Cache"] == "hit", dict(streamed.headers)
    assert streamed.headers["X-Deja-Match"] == hit.headers["X-Deja-Match"]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == f"Answer to: {first}"
    assert other.headers["X-Deja-Cache"] == "miss"
    assert after.output_text == "Answer to: Thanks"
