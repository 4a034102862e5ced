"""Real server processes for integration and end-to-end tests: the model server, the proxy."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    """A child process serving HTTP on `port`, its output in a log file."""

    def __init__(
        self, name: str, argv: list[str], port: int, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.port = port
        self.log = Path(tempfile.mkstemp(prefix=f"deja-{name}-", suffix=".log")[1])
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, path: str = "/readyz", timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.output()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=2) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as error:
                error.close()  # a 503 while loading: the error holds the response's socket
                time.sleep(0.2)
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} was not ready after {timeout_s} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def model_server(extra: list[str] | None = None) -> ServerProcess:
    port = free_port()
    argv = [sys.executable, "-m", "proxy.cli", "modelserver", "--port", str(port), *(extra or [])]
    return ServerProcess("modelserver", argv, port)


def proxy(upstream: str, redis_url: str = "", env: dict[str, str] | None = None) -> ServerProcess:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "proxy.cli",
        "serve",
        "--port",
        str(port),
        "--upstream",
        upstream,
        "--redis",
        redis_url,
    ]
    return ServerProcess(
        "proxy", argv, port, env={"DEJA_CACHE__TENANT_SECRET": "test", **(env or {})}
    )


@contextlib.contextmanager
def proxied_model_server(model_flags: list[str] | None = None) -> Iterator[ServerProcess]:
    """The real model server (`model_flags` added to its defaults) behind a proxy with its
    defaults and the semantic tier off (the repeats these tests send are word for word, so
    exact hits decide); yields the proxy, both stopped at the end."""
    server = model_server(model_flags)
    front: ServerProcess | None = None
    try:
        server.wait_ready()
        front = proxy(f"{server.url}/v1", env={"DEJA_SEMANTIC__ENABLED": "false"})
        front.wait_ready()
        yield front
    finally:
        if front is not None:
            front.stop()
        server.stop()
