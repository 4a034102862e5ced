"""Convert a Llama GGUF into a Hugging Face-style folder in the cache directory, once.

The GGUF is dequantized to float32 with the `gguf` package's numpy kernels (about 5 s for
SmolLM2-135M here, against about 35 s through transformers) and written as `model.safetensors`
with `config.json`, `tokenizer.json`, `tokenizer_config.json` and `generation_config.json`
beside it. Later loads read that folder, exactly as they would a model downloaded from the Hub,
in well under a second. The folder name holds the GGUF's path, size and mtime, so a changed file
is converted again; a conversion goes to a temporary folder first and is renamed into place, so a
crash never leaves a half-written cache behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from modelserver.arch import LlamaArch, RopeScaling
from modelserver.errors import ModelLoadError

logger = logging.getLogger(__name__)

# Bump when the folder layout or the conversion changes, so stale caches are not reused.
CONVERTER_VERSION = 1
COMPLETE_MARKER = "deja-converted.json"

_LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

# llama.cpp's pre-tokenizer names (`tokenizer.ggml.pre`) and how each splits text before BPE.
_DIGITS_THEN_GPT2 = ("smollm", "starcoder", "refact", "codeshell", "command-r", "minerva")
_GPT2 = ("default", "gpt2", "gpt-2")
_LLAMA3 = ("llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx", "falcon3")
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONTROL_TOKEN = 3
_USER_DEFINED_TOKEN = 4


def converted_folder(gguf_path: Path, cache_dir: Path) -> Path:
    """The cache folder for `gguf_path`, converting the file first if it is not there yet."""
    stat = gguf_path.stat()
    identity = f"{CONVERTER_VERSION}:{gguf_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    folder = cache_dir / f"{gguf_path.stem}-{digest}"
    if (folder / COMPLETE_MARKER).is_file():
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".converting-", dir=cache_dir))
    try:
        logger.info("converting %s into %s (once)", gguf_path, folder)
        _convert(gguf_path, staging)
        (staging / COMPLETE_MARKER).write_text(json.dumps({"source": str(gguf_path)}))
        if folder.exists():  # another process finished the same conversion first
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return folder


def _convert(gguf_path: Path, out: Path) -> None:
    from gguf import GGUFReader  # heavy import, needed only on a cache miss

    reader = GGUFReader(str(gguf_path))
    meta = {name: field.contents() for name, field in reader.fields.items()}
    architecture = meta.get("general.architecture")
    if architecture != "llama":
        raise ModelLoadError(f"{gguf_path}: architecture {architecture!r} is not llama")
    arch = _arch_from_metadata(
        meta, has_output=any(t.name == "output.weight" for t in reader.tensors)
    )
    tensors = {name: torch.from_numpy(array) for name, array in _dequantized(reader, arch)}
    save_file(tensors, str(out / "model.safetensors"))
    tokenizer = _tokenizer_from_metadata(meta, gguf_path)
    tokenizer.save(str(out / "tokenizer.json"))
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    bos_id, eos_id = (
        meta.get("tokenizer.ggml.bos_token_id"),
        meta.get("tokenizer.ggml.eos_token_id"),
    )
    config = arch.to_hf_config() | {"bos_token_id": bos_id, "eos_token_id": eos_id}
    _write_json(out / "config.json", config)
    _write_json(
        out / "tokenizer_config.json",
        {
            "chat_template": meta.get("tokenizer.chat_template"),
            "bos_token": tokens[bos_id] if bos_id is not None else None,
            "eos_token": tokens[eos_id] if eos_id is not None else None,
            "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        },
    )
    _write_json(out / "generation_config.json", {"bos_token_id": bos_id, "eos_token_id": eos_id})


def _arch_from_metadata(meta: dict[str, Any], *, has_output: bool) -> LlamaArch:
    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"llama.{key}", default)
        if value is None:
            raise ModelLoadError(f"GGUF metadata lacks llama.{key}")
        return value

    hidden_size, num_heads = int(get("embedding_length")), int(get("attention.head_count"))
    scaling_type = meta.get("llama.rope.scaling.type")
    rope_scaling = None
    if scaling_type == "linear":
        rope_scaling = RopeScaling("linear", factor=float(get("rope.scaling.factor")))
    elif scaling_type not in (None, "none"):
        raise ModelLoadError(f"GGUF rope scaling {scaling_type!r} is not supported")
    return LlamaArch(
        vocab_size=int(meta.get("llama.vocab_size") or len(meta["tokenizer.ggml.tokens"])),
        hidden_size=hidden_size,
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=num_heads,
        num_kv_heads=int(get("attention.head_count_kv", num_heads)),
        head_dim=int(get("rope.dimension_count", hidden_size // num_heads)),
        rope_theta=float(get("rope.freq_base", 10_000.0)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        max_position_embeddings=int(get("context_length")),
        tie_word_embeddings=not has_output,
        rope_scaling=rope_scaling,
    )


def _dequantized(reader: Any, arch: LlamaArch) -> list[tuple[str, np.ndarray]]:
    from gguf.quants import dequantize

    out = []
    for tensor in reader.tensors:
        name = _hf_name(tensor.name)
        # A copy: F32 tensors come back as read-only views of the memory-mapped file.
        weights = np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        # llama.cpp's converter interleaves the rotary halves of Q and K (GGUF applies RoPE to
        # adjacent pairs); undo it so the weights match Hugging Face's rotate-half RoPE, which is
        # the one our forward implements for every source.
        if name.endswith("q_proj.weight"):
            weights = _unpermute_rotary(weights, arch.num_heads)
        elif name.endswith("k_proj.weight"):
            weights = _unpermute_rotary(weights, arch.num_kv_heads)
        out.append((name, weights))
    return out


def _hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}.{parts[3]}"
    raise ModelLoadError(f"GGUF tensor {gguf_name!r} is not part of a plain Llama model")


def _unpermute_rotary(weights: np.ndarray, num_heads: int) -> np.ndarray:
    half = weights.shape[0] // num_heads // 2
    grouped = weights.reshape(num_heads, half, 2, *weights.shape[1:])
    return np.ascontiguousarray(grouped.swapaxes(2, 1).reshape(weights.shape))


def _tokenizer_from_metadata(meta: dict[str, Any], gguf_path: Path) -> Tokenizer:
    kind, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "default")
    if kind != "gpt2":
        raise ModelLoadError(
            f"{gguf_path}: tokenizer model {kind!r} is not supported from a GGUF (only byte-level "
            "BPE); point --model at the model's Hugging Face folder instead"
        )
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(merge.split(" ", 1)) for merge in meta["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = _pre_tokenizer(str(pre), gguf_path)
    tokenizer.decoder = decoders.ByteLevel()
    token_types: list[int] = meta.get("tokenizer.ggml.token_type") or []
    # Control tokens (<|im_start|>) must stay whole in rendered chat text; user-defined ones are
    # matched whole by llama.cpp too.
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, kind_id in zip(tokens, token_types, strict=False)
            if kind_id == _CONTROL_TOKEN
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, kind_id in zip(tokens, token_types, strict=False)
            if kind_id == _USER_DEFINED_TOKEN
        ]
    )
    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token") and bos_id is not None:
        bos = tokens[bos_id]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    return tokenizer


def _pre_tokenizer(pre: str, gguf_path: Path) -> pre_tokenizers.PreTokenizer:
    # The same splits llama.cpp applies for each name (llama-vocab.cpp), so token ids match it
    # and the model's original Hugging Face tokenizer.
    if pre in _DIGITS_THEN_GPT2:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    if pre in _GPT2:
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _LLAMA3:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise ModelLoadError(
        f"{gguf_path}: pre-tokenizer {pre!r} is not supported; use the Hugging Face folder"
    )


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False), encoding="utf-8")
