"""`deja doctor`: one verdict a line, against a real Redis, the stub upstream, real ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.admin.conftest import admin_sections
from tests.cli.conftest import Run, clean_environment, deja
from tests.conftest import ProxyFactory
from tests.support.redis_server import free_port
from tests.support.stub_upstream import Behaviour, StubUpstream

pytestmark = pytest.mark.redis

NO_MODELS = clean_environment(DEJA_SEMANTIC__ENABLED="false")


async def doctor(upstream: str, redis: str, port: int, env: dict[str, str] = NO_MODELS) -> Run:
    flags = ["--upstream", upstream, "--redis", redis, "--port", str(port)]
    return await deja("doctor", *flags, env=env)


def verdicts(run: Run) -> dict[str, tuple[str, str]]:
    """check → (ok or FAIL, detail)."""
    out = {}
    for line in run.out.splitlines()[:-1] if run.rc == 0 else run.out.splitlines():
        verdict, check, detail = line.split(None, 2)
        out[check] = (verdict, detail)
    return out


async def test_a_healthy_setup(stub: StubUpstream, redis_url: str) -> None:
    port = free_port()
    run = await doctor(stub.base_url, redis_url, port)
    assert (run.rc, run.err) == (0, "")
    assert run.out.splitlines()[-1] == "all 5 checks passed"
    found = verdicts(run)
    assert list(found) == ["config", "port", "redis", "upstream", "models"]
    assert found["config"] == ("ok", "built-in defaults, the environment and flags: valid")
    assert found["port"] == ("ok", f"127.0.0.1:{port} is free")
    assert found["redis"][0] == "ok" and found["redis"][1].startswith(f"{redis_url}: Redis 7.")
    assert found["upstream"][0] == "ok"
    assert found["upstream"][1].startswith(f"{stub.base_url} answered GET models: 200 in ")
    assert found["models"] == ("ok", "none to load (semantic.enabled is off)")
    assert stub.paths == ["/v1/models"]  # the one request it sent


async def test_redis_down(stub: StubUpstream) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    run = await doctor(stub.base_url, dead, free_port())
    assert run.rc == 1
    found = verdicts(run)
    assert (
        found["redis"][0] == "FAIL"
        and found["redis"][1] == f"{dead}: cannot connect (Connection refused)"
    )
    assert [v for v, _ in found.values()].count("FAIL") == 1
    assert run.error_line == "deja: 1 of 5 checks failed: redis"


async def test_upstream_down_or_failing(stub: StubUpstream, redis_url: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    run = await doctor(dead, redis_url, free_port())
    assert run.rc == 1
    verdict, detail = verdicts(run)["upstream"]
    assert (verdict, detail) == (
        "FAIL",
        f"{dead}: cannot connect to the upstream: " + detail.split(": ", 2)[2],
    )
    assert run.error_line == "deja: 1 of 5 checks failed: upstream"

    stub.behaviour = Behaviour(status=503, failures=10)
    run = await doctor(stub.base_url, redis_url, free_port())
    verdict, detail = verdicts(run)["upstream"]
    assert verdict == "FAIL" and detail.startswith(
        f"{stub.base_url} is failing: GET models answered 503"
    )


async def test_the_port_held_by_a_running_deja_or_by_something_else(
    proxy_factory: ProxyFactory, stub: StubUpstream, redis_url: str
) -> None:
    proxy = await proxy_factory(**admin_sections())
    deja_port = proxy.server.port
    assert deja_port is not None
    run = await doctor(stub.base_url, redis_url, deja_port)
    assert run.rc == 0
    assert verdicts(run)["port"] == (
        "ok",
        f"127.0.0.1:{deja_port} is held by a running Deja (/healthz ok)",
    )

    stub_port = stub.port
    run = await doctor(stub.base_url, redis_url, stub_port)
    assert run.rc == 1
    assert verdicts(run)["port"] == (
        "FAIL",
        f"127.0.0.1:{stub_port} is in use by another program (its /healthz answered 404)",
    )


async def test_an_invalid_configuration_stops_at_the_first_line(tmp_path: Path) -> None:
    config = tmp_path / "deja.yaml"
    config.write_text("server:\n  portt: 8080\n")
    run = await deja("doctor", "--config", str(config), env=NO_MODELS)
    assert run.rc == 1
    (line,) = run.out.splitlines()
    assert line.startswith("FAIL  config    ") and "portt" in line
    assert run.error_line == "deja: the configuration is invalid; the other checks need a valid one"


@pytest.mark.models
async def test_the_models_load_as_the_proxy_loads_them(stub: StubUpstream, redis_url: str) -> None:
    run = await doctor(stub.base_url, redis_url, free_port(), env=clean_environment())
    assert run.rc == 0, run.out + run.err
    verdict, detail = verdicts(run)["models"]
    assert verdict == "ok" and detail.startswith("loaded in ")
    assert detail.endswith("(en: 384-dim embeddings; lemma analysis)")
