"""docker-compose.yml: valid as `docker-compose config` reads it (offline: Debian's
docker-compose validates against the Compose schema without a Docker daemon), and what it says
agreeing with what the processes do."""

from __future__ import annotations

import functools
import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.dockerfile import image
from tests.deploy.listeners import LOOPBACK, listener_of, modelserver_config, urls_in

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
RESTART_POLICIES = {"always", "unless-stopped", "on-failure"}


def docker_compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed (make test installs it: ensure-system.sh)"
    # A bare environment: the file's ${VAR:-default}s resolve to their defaults, not to
    # whatever the developer's shell exports.
    return subprocess.run(
        [binary, "--file", str(path), "--project-directory", str(ROOT), "config"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@functools.cache
def services() -> dict[str, dict[str, Any]]:
    """The services as `docker-compose config` resolves them (once: it takes a second)."""
    done = docker_compose_config(COMPOSE_FILE)
    assert done.returncode == 0, done.stderr
    resolved: dict[str, dict[str, Any]] = yaml.safe_load(done.stdout)["services"]
    return resolved


def built_from_our_dockerfile(service: dict[str, Any]) -> bool:
    return service.get("build", {}).get("dockerfile") == "deploy/Dockerfile"


def test_docker_compose_accepts_the_file() -> None:
    assert set(services()) == {
        "redis", "modelserver", "proxy", "otel-collector", "prometheus", "grafana",
    }  # fmt: skip


def test_docker_compose_refuses_an_invalid_file(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("restart:", "restarts:", 1))
    done = docker_compose_config(broken)
    assert done.returncode != 0 and "restarts" in done.stderr


def test_every_service_restarts_after_a_crash() -> None:
    for name, service in services().items():
        assert service.get("restart") in RESTART_POLICIES, name


def _flags(command: list[str]) -> dict[str, str]:
    return {a: b for a, b in itertools.pairwise(command) if a.startswith("--")}


# Redis' memory units (redis.conf): k/m/g are powers of 1000, kb/mb/gb of 1024.
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 2**10, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30}


def _bytes(size: str) -> int:
    match = re.fullmatch(r"(\d+)([a-z]*)", size.lower())
    assert match is not None and match[2] in _UNITS, f"not a Redis memory size: {size!r}"
    return int(match[1]) * _UNITS[match[2]]


def test_a_redis_eviction_policy_comes_with_a_memory_limit() -> None:
    redises = [s for s in services().values() if s.get("command", [""])[0] == "redis-server"]
    assert redises
    for service in redises:
        flags = _flags(service["command"])
        if "--maxmemory-policy" in flags:
            # Without maxmemory Redis never evicts: the policy would do nothing.
            assert _bytes(flags.get("--maxmemory", "0")) > 0, service["command"]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    return {**image().env, **{k: str(v) for k, v in (service.get("environment") or {}).items()}}


def test_the_model_server_caches_its_weights_in_the_volume() -> None:
    found = 0
    for name, service in services().items():
        command = service.get("command") or image().cmd
        if not built_from_our_dockerfile(service) or command[1] != "modelserver":
            continue
        found += 1
        cache_dir = str(modelserver_config(command, _environment(service)).cache_dir)
        # docker-compose 1.x prints "source:target:mode", Compose v2 a mapping.
        volumes = service.get("volumes", [])
        targets = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in volumes]
        assert any(cache_dir.startswith(t.rstrip("/") + "/") for t in targets), (
            f"{name} caches in {cache_dir}, outside its volumes {targets}"
        )
    assert found == 1


def test_every_healthcheck_reaches_what_it_checks() -> None:
    checked = 0
    for name, service in services().items():
        if not built_from_our_dockerfile(service):
            continue
        command = service.get("command") or image().cmd
        listener = listener_of(command, _environment(service), image().folders())
        test = service.get("healthcheck", {}).get("test") or image().healthcheck
        urls = urls_in(test if isinstance(test, str) else " ".join(test))
        assert urls, f"{name} has no HTTP health check"
        for host, port, path in urls:
            # The check runs inside the container.
            assert listener.accepts(LOOPBACK, host, port), f"{name}: {host}:{port} vs {listener}"
            assert path in listener.paths, f"{name}: {path}"
            checked += 1
    assert checked == 2
