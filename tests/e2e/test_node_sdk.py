"""The official OpenAI Node SDK against the proxy: the embeddings batch of 100 with 60 cached,
vectors exactly the upstream's in the SDK's default (base64) and in float encoding.

Needs `node` and the SDK: `npm ci --prefix tests/node` (one package, no dependencies); skipped
without them.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ProxyFactory
from tests.support.stub_embeddings import stub_vector
from tests.support.stub_upstream import StubUpstream

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
MODEL = "text-embedding-3-small"
TEXTS = [f"sentence number {i} about caches" for i in range(100)]

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "openai").is_dir(),
    reason="needs node and `npm ci --prefix tests/node`",
)


async def test_the_node_sdk_gets_the_upstreams_vectors_and_60_of_100_cached(
    proxy_factory: ProxyFactory, stub: StubUpstream
) -> None:
    proxy = await proxy_factory()
    node = await asyncio.create_subprocess_exec(
        "node",
        str(NODE_DIR / "embeddings.mjs"),
        proxy.base_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(node.communicate(), timeout=120)
    assert node.returncode == 0, err.decode()
    result = json.loads(out)
    first, second, floats = result["first"], result["second"], result["asFloats"]
    assert (first["cache"], first["inputsCached"]) == ("miss", "0/60")
    assert (second["cache"], second["inputsCached"]) == ("partial", "60/100")
    assert (floats["cache"], floats["inputsCached"]) == ("hit", "100/100")
    assert stub.embedding_calls == [TEXTS[:60], TEXTS[60:]]
    assert second["indexes"] == list(range(100))
    assert second["promptTokens"] == 40 * 5
    expected = np.stack([stub_vector(MODEL, t, None) for t in TEXTS])
    for got in (second["vectors"], floats["vectors"]):
        assert np.array_equal(np.asarray(got, dtype=np.float64).astype(np.float32), expected)
