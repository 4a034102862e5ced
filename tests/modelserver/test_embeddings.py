"""`/v1/embeddings` of the model server with the real all-MiniLM-L6-v2 weights (the tiny random
generation model beside it), through the official openai client."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError

from core.sentence_encoder import SentenceEncoder, default_model_path, load_sentence_model
from modelserver.runtime import Runtime, build_runtime
from modelserver.weights import LoadedModel
from tests.modelserver.conftest import tiny_config
from tests.modelserver.test_openai_client import open_client

pytestmark = pytest.mark.models

TEXTS = ["How do I reset my password?", "The cat sat on the mat.", "Quantum tunnelling"]


@pytest.fixture(scope="module")
def minilm() -> SentenceEncoder:
    return load_sentence_model(default_model_path(), torch_threads=1)


@pytest.fixture
async def server_client(
    tiny_model: LoadedModel, minilm: SentenceEncoder
) -> AsyncIterator[AsyncOpenAI]:
    config = tiny_config(embeddings=True)
    runtime: Runtime = build_runtime(config, loaded=tiny_model, sentence_encoder=minilm)
    server, client = await open_client(config, runtime)
    yield client
    await client.close()
    await server.close()


def float32(rows: list[Any]) -> np.ndarray:
    """The rows as float32: floats, or base64 strings (the SDK hands those on undecoded when
    the caller asked for base64 itself)."""
    if rows and isinstance(rows[0], str):
        return np.stack([np.frombuffer(base64.b64decode(r), "<f4") for r in rows])
    return np.asarray(rows, dtype=np.float64).astype(np.float32)


@pytest.mark.parametrize("encoding", ["float", "base64"])
async def test_vectors_are_minilms_in_either_encoding(
    server_client: AsyncOpenAI, minilm: SentenceEncoder, encoding: Any
) -> None:
    result = await server_client.embeddings.create(
        model="all-minilm-l6-v2", input=TEXTS, encoding_format=encoding
    )
    assert result.model == "all-minilm-l6-v2"
    assert [d.index for d in result.data] == [0, 1, 2]
    got = float32([d.embedding for d in result.data])
    assert got.shape == (3, 384)
    assert np.array_equal(got, minilm.encode(TEXTS))
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    pieces = sum(len(ids) for ids in minilm.token_ids(TEXTS))
    assert result.usage.prompt_tokens == result.usage.total_tokens == pieces


async def test_a_texts_word_piece_ids_embed_as_the_text(
    server_client: AsyncOpenAI, minilm: SentenceEncoder
) -> None:
    ids = minilm.token_ids(TEXTS[:2])
    as_ids = await server_client.embeddings.create(model="all-MiniLM-L6-v2", input=ids)
    single = await server_client.embeddings.create(model="all-minilm-l6-v2", input=ids[0])
    expected = minilm.encode(TEXTS[:2])
    assert np.allclose(float32([d.embedding for d in as_ids.data]), expected, atol=1e-6)
    assert np.allclose(float32([single.data[0].embedding]), expected[:1], atol=1e-6)


async def test_what_minilm_cannot_do_is_a_clear_error(server_client: AsyncOpenAI) -> None:
    with pytest.raises(BadRequestError, match="'dimensions' must be 384"):
        await server_client.embeddings.create(model="all-minilm-l6-v2", input="x", dimensions=64)
    with pytest.raises(NotFoundError, match="embeds with 'all-minilm-l6-v2'"):
        await server_client.embeddings.create(model="text-embedding-3-small", input="x")
    with pytest.raises(BadRequestError, match="vocabulary size 30522"):
        await server_client.embeddings.create(model="all-minilm-l6-v2", input=[[40000]])
    with pytest.raises(BadRequestError, match="'input'"):
        await server_client.embeddings.create(model="all-minilm-l6-v2", input="")
    models = await server_client.models.list()
    assert [m.id for m in models.data] == ["random-tiny", "all-minilm-l6-v2"]


async def test_without_embeddings_there_is_no_route(tiny_model: LoadedModel) -> None:
    config = tiny_config()
    server, client = await open_client(config, build_runtime(config, loaded=tiny_model))
    try:
        with pytest.raises(NotFoundError):
            await client.embeddings.create(model="all-minilm-l6-v2", input="x")
    finally:
        await client.close()
        await server.close()
