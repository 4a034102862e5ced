"""`deja warmup FILE`: the proxy stores the lines, the command counts what it said of each."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from proxy.composition.app import create_app
from tests.admin.conftest import Client, admin_sections
from tests.cli.conftest import admin_env, deja
from tests.conftest import ProxyFactory, RunningProxy, make_config
from tests.support.redis_server import free_port
from tests.support.stub_upstream import StubUpstream
from tests.support.warmup_lines import warm_up_line


def refused_by_the_store_rule() -> bytes:
    """A finished answer no live miss would store (a content filter cut it)."""
    line = json.loads(warm_up_line("What is filtered?", "...", "sk-a"))
    line["response"]["choices"][0]["finish_reason"] = "content_filter"
    return json.dumps(line).encode()


def jsonl(path: Path, lines: list[bytes]) -> str:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


async def test_warmup_stores_lines_and_says_which_were_refused_and_why(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    proxy = await proxy_factory(**admin_sections())
    client = Client(session, proxy)
    questions = [f"What is warm-up question {n}?" for n in range(3)]
    lines = [warm_up_line(q, f"Answer {n}", "sk-a") for n, q in enumerate(questions)]
    # Line 4 is not JSON, line 5 is blank (skipped), lines 6 and 7 break the store rule.
    lines += [b"{not json", b"", refused_by_the_store_rule(), refused_by_the_store_rule()]
    path = jsonl(tmp_path / "pairs.jsonl", lines)

    run = await deja("warmup", path, "--progress", env=admin_env(proxy.url("/")))
    assert run.rc == 1
    summary = run.out.splitlines()
    assert summary[0] == f"warm-up of {path}: 6 lines, 3 stored, 3 refused"
    assert summary[1] == (
        "  2 × this answer is not one a live miss would store"
        " (finish_reason ['content_filter']) (lines 6, 7)"
    )
    assert summary[2].startswith("  1 × not JSON: ") and summary[2].endswith("(line 4)")
    assert len(summary) == 3
    # The bar on stderr, redrawn in place, ends complete; then the one error line.
    bar, error = run.err.rsplit("\n", 2)[:2]
    assert bar.endswith("\rwarming up [" + "#" * 30 + "] 6/6 lines  stored 3  refused 3")
    assert error == "deja: 3 of 6 lines were refused"
    for question in questions:
        assert (await client.ask(question, key="sk-a")).headers["X-Deja-Cache"] == "hit"


async def test_a_clean_warmup_exits_zero_and_reads_stdin(
    proxy_factory: ProxyFactory, session: aiohttp.ClientSession
) -> None:
    proxy = await proxy_factory(**admin_sections())
    client = Client(session, proxy)
    body = b"\n".join(warm_up_line(f"Question {n}?", "Yes.", "sk-b") for n in range(4)) + b"\n"
    run = await deja("warmup", "-", env=admin_env(proxy.url("/")), stdin=body)
    assert (run.rc, run.out, run.err) == (0, "warm-up of stdin: 4 lines, 4 stored, 0 refused\n", "")
    assert (await client.ask("Question 3?", key="sk-b")).headers["X-Deja-Cache"] == "hit"


async def test_warmup_summary_as_json(proxy_factory: ProxyFactory, tmp_path: Path) -> None:
    proxy = await proxy_factory(**admin_sections())
    path = jsonl(tmp_path / "pairs.jsonl", [warm_up_line("Q?", "A.", "sk-c"), b"[1, 2]"])
    run = await deja("warmup", path, "--json", env=admin_env(proxy.url("/")))
    assert run.rc == 1
    assert json.loads(run.out) == {
        "lines": 2,
        "stored": 1,
        "refused": 1,
        "reasons": [
            {
                "reason": "each line must be a JSON object with 'request' and 'response'",
                "lines": [2],
            }
        ],
    }
    assert run.error_line == "deja: 1 of 2 lines were refused"


async def test_a_missing_file_is_one_line(proxy_factory: ProxyFactory, tmp_path: Path) -> None:
    proxy = await proxy_factory(**admin_sections())
    run = await deja("warmup", str(tmp_path / "nowhere.jsonl"), env=admin_env(proxy.url("/")))
    assert (run.rc, run.out) == (1, "")
    assert (
        run.error_line
        == f"deja: cannot read {tmp_path / 'nowhere.jsonl'}: No such file or directory"
    )


async def test_wait_holds_the_warmup_until_a_proxy_starting_up_is_ready(
    stub: StubUpstream, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    port = free_port()
    path = jsonl(tmp_path / "pairs.jsonl", [warm_up_line("Early question?", "Early.", "sk-e")])
    env = admin_env(f"http://127.0.0.1:{port}")
    warming = asyncio.ensure_future(deja("warmup", path, "--wait", "30", env=env))
    await asyncio.sleep(1.0)  # the command is waiting: nothing listens yet
    assert not warming.done()
    sections = admin_sections(upstream={"url": stub.base_url}, semantic={"enabled": False})
    server = TestServer(create_app(make_config(sections)), host="127.0.0.1", port=port)
    await server.start_server()
    try:
        run = await warming
        assert (run.rc, run.err) == (0, "")
        assert run.out == f"warm-up of {path}: 1 line, 1 stored, 0 refused\n"
        reply = await Client(session, RunningProxy(server, server.app)).ask(
            "Early question?", key="sk-e"
        )
        assert reply.headers["X-Deja-Cache"] == "hit"
    finally:
        await server.close()


async def test_wait_gives_up_on_a_proxy_that_never_comes(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    path = jsonl(tmp_path / "pairs.jsonl", [warm_up_line("Q?", "A.", "sk-a")])
    run = await deja("warmup", path, "--wait", "1", env=admin_env(url))
    assert (run.rc, run.out) == (1, "")
    assert run.error_line == (
        f"deja: the proxy was not ready after 1 s: cannot reach the proxy at {url}"
        " (Connection refused)"
    )
