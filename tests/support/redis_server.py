"""A real redis-server on a free loopback port, which tests may stop and start again."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(
        self,
        port: int | None = None,
        prefix: Sequence[str] = (),
        binary: str | None = None,
        arguments: Sequence[str] = (),
        library_path: str | None = None,
        start_timeout_s: float = 10.0,
    ) -> None:
        """`prefix`: a command to run redis-server under (the benchmarks pin it to a core).
        `binary`, `arguments` and `library_path` (LD_LIBRARY_PATH): another server than
        Debian's, such as Redis Stack's with its search module (tests/support/redis_stack.py)."""
        binary = binary or shutil.which("redis-server")
        assert binary, (
            "redis-server is not installed (make test installs it: scripts/ensure-system.sh)"
        )
        self._binary = binary
        self._arguments = list(arguments)
        self._env = (
            None if library_path is None else {**os.environ, "LD_LIBRARY_PATH": library_path}
        )
        self._start_timeout_s = start_timeout_s  # a start loads dump.rdb before it answers
        self.port = port or free_port()
        self._prefix = list(prefix)
        self._dir = tempfile.mkdtemp(prefix="deja-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self._process is None, "already running"
        self._process = subprocess.Popen(
            [
                *self._prefix,
                self._binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir,
                "--protected-mode",
                "no",
                *self._arguments,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self._env,
        )
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    answer = s.recv(16)
            except OSError:
                answer = b""  # not listening yet
            if answer.startswith(b"+PONG"):
                return
            # Paced also while it answers -LOADING: a start can load for minutes, and a poll
            # without a pause would take a core from the load it waits for.
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    @property
    def folder(self) -> str:
        """Its working folder, where a SAVE writes dump.rdb and a start loads it from."""
        return self._dir

    def stop(self) -> None:
        """Kill it (SIGKILL: an outage, not a polite shutdown)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
