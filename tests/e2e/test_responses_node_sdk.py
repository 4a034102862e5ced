"""The official Node SDK's `responses` API through the proxy (tests/node/responses_sdk.cjs).

Needs `node` and the `openai` npm package: in tests/node/node_modules (`npm ci --prefix
tests/node`, which `make test` runs where npm is installed: openai 6, as 7 needs Node 22) or in
the folder DEJA_NODE_MODULES names.
Skipped, saying so, where either is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ProxyFactory
from tests.support.stub_upstream import StubUpstream

HERE = Path(__file__).resolve().parents[1] / "node"


def _node_modules() -> Path | None:
    for folder in (os.environ.get("DEJA_NODE_MODULES"), str(HERE / "node_modules")):
        if folder and (Path(folder) / "openai").is_dir():
            return Path(folder)
    return None


async def test_the_node_sdk_misses_then_hits(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    node, modules = shutil.which("node"), _node_modules()
    if node is None or modules is None:
        pytest.skip("needs node and the openai npm package (see this module's docstring)")
    proxy = await proxy_factory()
    process = await asyncio.create_subprocess_exec(
        node,
        str(HERE / "responses_sdk.cjs"),
        proxy.base_url,
        env={**os.environ, "NODE_PATH": str(modules)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, stderr.decode()
    out: dict[str, Any] = json.loads(stdout)

    plain = out["plain"]
    assert [p["cache"] for p in plain] == ["miss", "hit"]
    assert plain[0]["text"] == plain[1]["text"] == "Answer to: Node plain question"
    assert plain[0]["id"] == plain[1]["id"]

    for run, cache in zip(out["streamed"], ("miss", "hit"), strict=True):
        assert run["cache"] == cache
        assert run["types"][0] == "response.created" and run["types"][-1] == "response.completed"
        assert run["numbers"] == sorted(set(run["numbers"]))
        assert run["text"] == run["final_text"] == "Answer to: Node streamed question"
    assert out["streamed"][0]["id"] == out["streamed"][1]["id"]

    helper = out["helper"]
    assert [h["text"] for h in helper] == ["Answer to: Node helper question"] * 2
    assert [h["final_text"] for h in helper] == ["Answer to: Node helper question"] * 2
    assert helper[0]["id"] == helper[1]["id"]

    assert out["chain"] == {"text": "Answer to: Node follow-up", "previous": plain[0]["id"]}
    assert out["retrieved"] == "Answer to: Node helper question"
    assert stub.response_calls() == 4  # one per question, and the follow-up
