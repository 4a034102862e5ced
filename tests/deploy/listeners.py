"""What a container's `deja` command listens on, found by the project's own CLI code.

The proxy's address comes from `deja config` run as a subprocess with the container's
arguments and environment (and its files mapped to this checkout), so the file < environment <
flag precedence is the real one and not a copy of it. The model server's comes from its own
argument parser. A probe then reaches the process only if it comes from where the bound address
accepts connections: a loopback bind accepts only the container's own network namespace (the
pod's, in Kubernetes), while the kubelet's httpGet probes and a Prometheus scrape arrive at the
pod IP.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from modelserver.cli import build_parser, config_from_args
from modelserver.config import ModelServerConfig

ROOT = Path(__file__).resolve().parents[2]

# Where a probe comes from: inside the network namespace, or at the pod's own address.
LOOPBACK = "loopback"
POD_IP = "pod-ip"

# The GET endpoints of each server (README "Endpoints", docs/modelserver.md "Endpoints").
_PROXY_PATHS = frozenset({"/healthz", "/readyz"})
_MODELSERVER_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/v1/models"})


@dataclass(frozen=True, slots=True)
class Listener:
    program: str  # "serve" or "modelserver"
    host: str
    port: int
    paths: frozenset[str]

    def accepts(self, origin: str, host: str | None, port: int) -> bool:
        """Whether a connection from `origin` to `host:port` (None: the pod IP) arrives here."""
        if port != self.port:
            return False
        if self.host in ("", "0.0.0.0", "::", "*"):
            return True  # every address of the namespace, loopback included
        if _is_loopback(self.host):
            return origin == LOOPBACK and host is not None and _is_loopback(host)
        # A fixed non-loopback address: a manifest cannot know it is the pod's.
        return host == self.host


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listener_of(
    argv: Sequence[str], environ: Mapping[str, str], files: Mapping[str, Path]
) -> Listener:
    """`argv` is a container's command (`deja serve …` / `deja modelserver …`); `files` maps
    folders of the container's filesystem to folders of this machine."""
    assert len(argv) >= 2 and Path(argv[0]).name == "deja", f"not a deja command: {argv}"
    if argv[1] == "modelserver":
        config = modelserver_config(argv, environ)
        return Listener("modelserver", config.host, config.port, _MODELSERVER_PATHS)
    assert argv[1] == "serve", f"unknown deja command: {argv}"
    effective = proxy_config(argv, environ, files)
    paths = frozenset(_PROXY_PATHS | ({"/metrics"} if effective["telemetry"]["metrics"] else set()))
    if _role(argv) == "worker":
        # A shared edge worker listens on edge.worker_listen, not on server.host:port.
        host, _, port = str(effective["edge"]["worker_listen"]).rpartition(":")
        return Listener("serve --role worker", host.strip("[]"), int(port), paths)
    server = effective["server"]
    return Listener("serve", str(server["host"]), int(str(server["port"])), paths)


def _role(argv: Sequence[str]) -> str:
    args = list(argv)
    for i, arg in enumerate(args):
        if arg.startswith("--role="):
            return arg.split("=", 1)[1]
        if arg == "--role" and i + 1 < len(args):
            return args[i + 1]
    return "proxy"


def modelserver_config(argv: Sequence[str], environ: Mapping[str, str]) -> ModelServerConfig:
    return config_from_args(build_parser(environ).parse_args(list(argv[2:])))


def proxy_config(
    argv: Sequence[str], environ: Mapping[str, str], files: Mapping[str, Path]
) -> dict[str, dict[str, object]]:
    """The effective configuration `deja serve` would run with, as `deja config` prints it."""
    args = [str(_mapped(a, files)) for a in argv[2:]]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        **{k: str(_mapped(v, files)) for k, v in environ.items()},
    }
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "config", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"deja config {args} failed: {done.stderr}"
    result: dict[str, dict[str, object]] = json.loads(done.stdout)
    return result


def _mapped(value: str, files: Mapping[str, Path]) -> str | Path:
    for folder, local in files.items():
        if value == folder or value.startswith(folder.rstrip("/") + "/"):
            return local / os.path.relpath(value, folder)
    return value


def urls_in(command: str) -> list[tuple[str, int, str]]:
    """(host, port, path) of every http:// URL in a health-check command line."""
    found = []
    for url in re.findall(r"http://[^\s'\"]+", command):
        parts = urlsplit(url)
        assert parts.hostname is not None, f"no host in {url}"
        found.append((parts.hostname, parts.port or 80, parts.path or "/"))
    return found
