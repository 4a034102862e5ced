"""Fixtures of the model server tests.

Tiny random-weight models (`random:tiny`, the SmolLM2 layout at toy size) make scheduler, pool,
engine and HTTP tests run in seconds. Tests marked `modelserver` load the real SmolLM2 weights:
their GGUF is converted once into the model server's own cache directory (`default_cache_dir`:
$DEJA_MODEL_CACHE_DIR, else $XDG_CACHE_HOME/deja/models, else ~/.cache/deja/models), so only the
first run pays for the dequantization.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from modelserver.cli import default_cache_dir
from modelserver.config import ModelServerConfig
from modelserver.runtime import Runtime, build_runtime
from modelserver.weights import LoadedModel, load_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TINY_CONFIG = ModelServerConfig(
    model="random:tiny",
    kv_cache_blocks=64,
    block_size=4,
    max_num_seqs=8,
    max_batch_tokens=64,
    default_max_tokens=16,
    warmup=False,
    embeddings=False,
)


def model_cache_dir() -> Path:
    # The server's own rule, so a test run and `deja modelserver` share one conversion.
    return default_cache_dir(os.environ).expanduser()


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    # As the server runs by default: two threads on two shared cores slow everything 10x
    # whenever another process is busy (MODELS.md).
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model() -> LoadedModel:
    return load_model("random:tiny", cache_dir=Path("/nonexistent"), random_seed=0)


@pytest.fixture
def make_tiny_runtime(tiny_model: LoadedModel) -> Callable[..., Runtime]:
    """Build a fresh tiny runtime; keyword arguments replace fields of TINY_CONFIG."""

    def make(**changes: object) -> Runtime:
        return build_runtime(tiny_config(**changes), loaded=tiny_model)

    return make


def tiny_config(**changes: object) -> ModelServerConfig:
    return replace(TINY_CONFIG, **changes)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    return load_model("smollm2", cache_dir=model_cache_dir())
