"""Flags → config, start-up failures, and a real `python -m modelserver` process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from modelserver.cli import build_parser, config_from_args, main
from modelserver.config import ModelServerConfig
from modelserver.errors import ConfigError
from modelserver.runtime import resolve_device, resolve_dtype

ROOT = Path(__file__).resolve().parents[2]


def test_default_flags_give_the_default_config() -> None:
    assert config_from_args(build_parser().parse_args([])) == ModelServerConfig()


def test_flags_reach_the_config() -> None:
    args = build_parser().parse_args(
        [
            "--host",
            "0.0.0.0",
            "--port",
            "9000",
            "--model",
            "/models/x",
            "--device",
            "cpu",
            "--kv-cache-mib",
            "64",
            "--block-size",
            "32",
            "--max-batch",
            "4",
            "--threads",
            "2",
            "--cache-dir",
            "/tmp/c",
            "--no-warmup",
        ]
    )
    config = config_from_args(args)

    assert (config.host, config.port, config.model, config.device) == (
        "0.0.0.0",
        9000,
        "/models/x",
        "cpu",
    )
    assert (config.kv_cache_mib, config.block_size, config.max_num_seqs) == (64, 32, 4)
    assert (config.threads, config.cache_dir, config.warmup) == (2, Path("/tmp/c"), False)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"device": "tpu"}, "device must be one of"),
        ({"block_size": 0}, "block_size must be positive"),
        ({"max_num_seqs": 32, "max_batch_tokens": 16}, "at least max_num_seqs"),
        ({"port": 70000}, "port must be in"),
    ],
)
def test_invalid_settings_are_refused_with_a_clear_message(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelServerConfig(**changes)  # type: ignore[arg-type]


def test_a_failed_start_exits_2_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "random:nope", "--no-warmup"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def test_auto_picks_cuda_only_when_present() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sees no GPU"):
            resolve_device("cuda")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_process_binds_once_ready_serves_and_stops_on_sigterm() -> None:
    port = free_port()
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "modelserver",
            "--model",
            "random:tiny",
            "--port",
            str(port),
            "--kv-cache-blocks",
            "64",
            "--block-size",
            "4",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        ready = None
        deadline = time.monotonic() + 60
        while ready is None and time.monotonic() < deadline:
            assert process.poll() is None, "the server exited before it was ready"
            try:
                # Connection refused until the model is loaded and warmed up; then ready at once.
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/readyz", timeout=5
                ) as response:
                    ready = json.loads(response.read())
            except urllib.error.HTTPError as error:
                error.close()  # the error holds the response's socket
                time.sleep(0.2)
            except OSError:
                time.sleep(0.2)
        assert ready is not None and ready["status"] == "ready"
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps({"model": "random-tiny", "prompt": "hi", "max_tokens": 3}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["usage"]["completion_tokens"] <= 3
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)  # also closes the pipes
    assert process.returncode == 0, stderr.decode()
