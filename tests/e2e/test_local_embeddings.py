"""The local stack answers embeddings: the official openai client, through a `deja serve`
process, against a `deja modelserver` process serving all-MiniLM-L6-v2 (beside a tiny random
generation model), with no account anywhere."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from openai import OpenAI

from core.sentence_encoder import default_model_path, load_sentence_model
from tests.support.processes import ServerProcess, proxied_model_server

pytestmark = pytest.mark.models

TEXTS = ["What is a cache?", "How do I rotate an API key?"]


@pytest.fixture(scope="module")
def deja() -> Iterator[ServerProcess]:
    with proxied_model_server(["--model", "random:tiny", "--no-warmup"]) as front:
        yield front


def test_embeddings_through_the_proxy_then_from_its_cache(deja: ServerProcess) -> None:
    with OpenAI(base_url=f"{deja.url}/v1", api_key="sk-local", max_retries=0) as client:
        first = client.embeddings.with_raw_response.create(model="all-minilm-l6-v2", input=TEXTS)
        second = client.embeddings.with_raw_response.create(
            model="all-minilm-l6-v2", input=[*TEXTS, "A third one"]
        )
    assert first.headers["X-Deja-Cache"] == "miss"
    assert second.headers["X-Deja-Cache"] == "partial"
    assert second.headers["X-Deja-Inputs-Cached"] == "2/3"
    stored = np.asarray([d.embedding for d in first.parse().data], dtype=np.float32)
    got = np.asarray([d.embedding for d in second.parse().data], dtype=np.float32)
    assert np.array_equal(got[:2], stored)  # the cached ones, bit for bit
    # Loaded here only after the servers are up: one model-loading process at a time. (The
    # server embedded the third input in a batch of its own: padding moves the last bits.)
    expected = load_sentence_model(default_model_path(), torch_threads=1).encode(
        [*TEXTS, "A third one"]
    )
    assert np.allclose(got, expected, atol=1e-6)
