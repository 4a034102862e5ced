"""The `deja` command run as a user runs it: a child process (`python -m proxy.cli`), here
against proxies this test's event loop serves, so the child is awaited, never waited for."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.admin.conftest import TOKEN
from tests.admin.conftest import session as session  # the fixture, shared

ROOT = Path(__file__).resolve().parents[2]
# Generous: doctor loads the models, which takes minutes on a busy two-core machine.
TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Run:
    rc: int
    out: str
    err: str

    @property
    def error_line(self) -> str:
        """The one line an error leaves on stderr (the test fails if there are more)."""
        lines = self.err.splitlines()
        assert len(lines) == 1, f"not one line on stderr: {self.err!r}"
        return lines[0]


def clean_environment(**extra: str) -> dict[str, str]:
    """The test's environment without any DEJA_ setting of the machine running it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


async def deja(*args: str, env: dict[str, str] | None = None, stdin: bytes = b"") -> Run:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy.cli",
        *args,
        cwd=ROOT,
        env=env if env is not None else clean_environment(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


def admin_env(url: str, token: str = TOKEN) -> dict[str, str]:
    """The environment of an operator whose admin commands go to the proxy at `url`."""
    return clean_environment(DEJA_URL=url, DEJA_ADMIN_TOKEN=token)
