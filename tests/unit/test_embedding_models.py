"""`semantic.model` and `semantic.rescore_model`: the names, the folder form, the deprecated
`semantic.model_path`, and the errors for an unknown name or a model whose package is missing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from core.config_checks import model_problems
from core.config_loader import load_config
from core.embedding_models import (
    EMBEDDING_MODELS,
    MINILM,
    MPNET,
    RESCORE_SCALE,
    EmbeddingModel,
    scale_anchors,
)
from core.errors import ConfigError
from core.semantic_config import SemanticConfig

# A catalogued model whose weights package is not installed anywhere.
ABSENT = EmbeddingModel(
    "absent", "Absent-v1", "sentence-transformers", ("no_such_weights_pkg",), "absent", 8, 0.8
)


def test_the_default_is_minilm_on_the_reference_scale() -> None:
    config = load_config(None, {}, {})
    assert config.semantic.model == "minilm"
    assert not config.semantic.two_stage
    assert scale_anchors(config.semantic)["en"] == config.semantic.threshold


def test_every_catalogued_name_is_known_to_the_check() -> None:
    assert set(EMBEDDING_MODELS) == {"minilm", "mpnet", "e5-small"}
    # Installed here (the default dependencies): no problem.
    assert list(model_problems("semantic.model", "minilm")) == []
    assert list(model_problems("semantic.model", "e5-small")) == []


def test_an_unknown_name_lists_the_known_ones() -> None:
    (problem,) = model_problems("semantic.model", "bert-large")
    assert "'bert-large' is neither a known model (minilm, mpnet, e5-small) nor a folder" in problem
    with pytest.raises(ConfigError, match=r"semantic\.model 'bert-large'"):
        load_config(None, {"DEJA_SEMANTIC__MODEL": "bert-large"})


def test_a_missing_package_says_how_to_install_it() -> None:
    (problem,) = model_problems("semantic.model", "absent", {"absent": ABSENT})
    assert problem == (
        "semantic.model is 'absent' but no_such_weights_pkg is not installed: make absent"
        " (the 'absent' extra of pyproject.toml, installed with --no-deps),"
        " or make run SEMANTIC_MODEL=absent"
    )


def test_a_folder_is_a_model(tmp_path: Path) -> None:
    config = load_config(None, {"DEJA_SEMANTIC__MODEL": str(tmp_path)})
    assert config.semantic.model == str(tmp_path)
    # A folder's cosines are read as they are, unless its own threshold is given.
    assert scale_anchors(config.semantic)["en"] == config.semantic.threshold
    tuned = replace(config.semantic, model_threshold=0.7)
    assert scale_anchors(tuned)["en"] == 0.7


def test_model_path_is_a_deprecated_alias(tmp_path: Path) -> None:
    with pytest.warns(FutureWarning, match="semantic.model_path is deprecated"):
        config = load_config(None, None, {"semantic": {"model_path": str(tmp_path)}})
    assert (config.semantic.model, config.semantic.model_path) == (str(tmp_path), "")


def test_model_and_model_path_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"set semantic\.model only"):
        SemanticConfig(model="mpnet", model_path=str(tmp_path))


def test_mpnet_is_read_through_its_calibrated_threshold() -> None:
    config = SemanticConfig(model="mpnet")
    assert scale_anchors(config)["en"] == MPNET.threshold
    assert MPNET.extra == "mpnet" and MPNET.bytes_per_vector == 3072
    assert MINILM.bytes_per_vector == 1536


def test_two_stage_maps_the_second_model_of_its_own() -> None:
    config = SemanticConfig(rescore_model="mpnet")
    assert config.two_stage
    anchors = scale_anchors(config)
    # Re-scoring only adds hits, so its threshold is stricter than mpnet's alone.
    assert MPNET.rescore_threshold > MPNET.threshold
    assert (anchors["en"], anchors[RESCORE_SCALE]) == (config.threshold, MPNET.rescore_threshold)
    tuned = replace(config, rescore_threshold=0.87)
    assert scale_anchors(tuned)[RESCORE_SCALE] == 0.87


def test_a_folder_as_second_model_is_read_as_it_is(tmp_path: Path) -> None:
    config = SemanticConfig(rescore_model=str(tmp_path))
    assert scale_anchors(config)[RESCORE_SCALE] == config.threshold


def test_a_second_model_equal_to_the_first_is_refused() -> None:
    with pytest.raises(ConfigError, match="rescore_model must be another model"):
        load_config(None, {"DEJA_SEMANTIC__RESCORE_MODEL": "minilm"})
