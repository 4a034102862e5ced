"""Every admin command fails the same way: one line on stderr that says what to do, a
non-zero exit status, no traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.admin.conftest import admin_sections
from tests.cli.conftest import admin_env, clean_environment, deja
from tests.conftest import ProxyFactory
from tests.support.redis_server import free_port
from tests.support.warmup_lines import warm_up_line

COMMANDS = [
    ["stats"],
    ["stats", "--json"],
    ["entries", "list"],
    ["entries", "show", "ab-cd"],
    ["entries", "delete", "ab-cd"],
    ["invalidate", "--all", "--yes"],
    ["invalidate", "--namespace", "docs", "--yes"],
    ["feedback", "--entry", "ab-cd", "useful"],
    ["warmup", "WARMUP_FILE"],
]


def with_file(args: list[str], tmp_path: Path) -> list[str]:
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(warm_up_line("Q?", "A.", "sk-a") + b"\n")
    return [str(path) if a == "WARMUP_FILE" else a for a in args]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
async def test_a_stopped_proxy(args: list[str], tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    run = await deja(*with_file(args, tmp_path), env=admin_env(url))
    assert (run.rc, run.out) == (1, "")
    assert run.error_line == (
        f"deja: cannot reach the proxy at {url} (Connection refused); is it running?"
        " (--url or DEJA_URL)"
    )


# Not feedback: a bearer that is not the admin token is a client's key there, and another
# tenant's entry is "not found" (the admin API's test_feedback_api covers it).
@pytest.mark.parametrize("args", [c for c in COMMANDS if c[0] != "feedback"], ids=" ".join)
async def test_a_wrong_token(proxy_factory: ProxyFactory, args: list[str], tmp_path: Path) -> None:
    proxy = await proxy_factory(**admin_sections())
    run = await deja(*with_file(args, tmp_path), env=admin_env(proxy.url("/"), token="wrong"))
    assert (run.rc, run.out) == (1, "")
    assert run.error_line.startswith("deja: the proxy refused the credentials (")
    assert run.error_line.endswith("); check --token or DEJA_ADMIN_TOKEN")


async def test_no_token_at_all_is_caught_before_asking() -> None:
    env = clean_environment(DEJA_URL=f"http://127.0.0.1:{free_port()}")
    run = await deja("stats", env=env)
    assert (run.rc, run.out) == (1, "")
    assert run.error_line == "deja: no admin token given: pass --token or set DEJA_ADMIN_TOKEN"


async def test_flags_beat_the_environment(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory(**admin_sections())
    env = admin_env(f"http://127.0.0.1:{free_port()}", token="wrong")
    run = await deja("stats", "--url", proxy.url("/"), "--token", "admin-secret", env=env)
    assert (run.rc, run.err) == (0, "")
    assert run.out.startswith(f"Proxy  {proxy.url('/')}".replace("  ", " " * 18))


async def test_a_proxy_without_the_admin_api(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory()  # no admin.token: the admin API answers 404
    run = await deja("entries", "list", env=admin_env(proxy.url("/")))
    assert run.rc == 1
    assert run.error_line == (
        f"deja: the proxy at {proxy.url('/')} has no admin API: start it with an admin token"
        " (admin.token, DEJA_ADMIN_TOKEN)"
    )


async def test_something_that_is_not_deja(stub_url: str) -> None:
    run = await deja("stats", env=admin_env(stub_url))
    assert run.rc == 1
    assert run.error_line == f"deja: {stub_url} answered 404 Not Found: is it a Deja proxy?"


@pytest.fixture
def stub_url(stub: object) -> str:
    base: str = stub.base_url  # type: ignore[attr-defined]
    return base.rsplit("/v1", 1)[0]


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1:1", "127.0.0.1:8080"], ids=["scheme", "no scheme"]
)
async def test_a_malformed_url(url: str) -> None:
    run = await deja("stats", env=admin_env(url))
    assert run.rc == 1
    assert run.error_line == (
        f"deja: the proxy URL must be http://host:port or https://…, not {url!r}"
    )


async def test_a_usage_mistake_exits_2() -> None:
    run = await deja("entries", "frobnicate", env=admin_env("http://127.0.0.1:1"))
    assert run.rc == 2
    assert run.error_line.startswith("deja entries: argument ACTION: invalid choice: 'frobnicate'")


async def test_a_silent_proxy_is_given_up_on_after_the_timeout() -> None:
    # A socket that listens but never answers: the connection opens, no answer comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        run = await deja("stats", "--timeout", "0.5", env=admin_env(url))
    assert (run.rc, run.out) == (1, "")
    assert run.error_line == f"deja: the proxy at {url} did not answer within 0.5 s (--timeout)"
