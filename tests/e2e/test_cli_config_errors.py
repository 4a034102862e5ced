"""`deja serve` with a bad configuration: it exits with status 2 and one line on stderr that
names the key, no traceback, and it started nothing (no worker, no model process)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT
from tests.support.redis_server import free_port

# (the key the line must name, the config file's text, extra environment, extra flags)
CASES: list[tuple[str, str, dict[str, str], list[str]]] = [
    ("telemetry.otlp_endpoint", "telemetry: {traces: otlp}\n", {}, []),
    ("semantic.languages", "semantic: {languages: [fr]}\n", {}, []),
    ("upstream.url", "", {"DEJA_UPSTREAM_URL": "http://127.0.0.1:8081"}, []),
    ("guardrails.injection_patterns[0]", "guardrails: {injection_patterns: ['(x']}\n", {}, []),
    ("pricing.models[0]", "pricing: {models: [{model: m}]}\n", {}, []),
    ("not valid YAML at line 3", "server:\n port: 1\n  host: x\n", {}, []),
    ("--log-level", "", {}, ["--log-level", "LOUD"]),
    # Edge mode's front would start a worker process: the error comes before it.
    (
        "semantic.languages",
        "server: {edge: true}\nredis: {url: 'redis://127.0.0.1:1/0'}\n"
        "semantic: {languages: [de]}\n",
        {},
        [],
    ),
]


@pytest.mark.parametrize("key,text,env,flags", CASES, ids=[c[0] for c in CASES])
def test_a_bad_configuration_stops_the_start_in_one_line(
    tmp_path: Path, key: str, text: str, env: dict[str, str], flags: list[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    argv = [sys.executable, "-m", "proxy.cli", "serve", "--config", str(path)]
    argv += ["--port", str(free_port()), *flags]
    # A process group of its own: whatever it started would still be in it after it exits.
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=60)
        started_something = _group_alive(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # it started serving: the test fails below
        proc.wait()
    assert not started_something, "a process it started outlived it"
    lines = stderr.splitlines()
    assert proc.returncode == 2, stderr
    assert len(lines) == 1 and key in lines[0], stderr
    assert lines[0].startswith("deja"), lines
    assert stdout == ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
