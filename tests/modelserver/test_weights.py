"""Loading: a tiny GGUF written here (as llama.cpp's converter writes one) and a Hugging Face
folder, both checked against transformers."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from modelserver.arch import PRESETS, LlamaArch
from modelserver.errors import ModelLoadError
from modelserver.forward_batch import SequenceChunk, build_forward_batch
from modelserver.gguf_convert import COMPLETE_MARKER, converted_folder
from modelserver.kv_cache import KVCache
from modelserver.model import LlamaModel
from modelserver.tokenizer import CHATML_TEMPLATE, TextTokenizer, byte_level_alphabet
from modelserver.weights import load_model, random_weights
from tests.support.float_tolerance import assert_logits_close

ARCH = PRESETS["tiny"]
CPU = torch.device("cpu")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["t h", "th e", "Ġ the", "i n", "Ġ in"]


def vocabulary() -> list[str]:
    tokens = SPECIALS + list(byte_level_alphabet().values())
    tokens += ["".join(merge.split(" ")) for merge in MERGES]
    return tokens + [f"<unused{i}>" for i in range(ARCH.vocab_size - len(tokens))]


def llama_cpp_permute(weights: np.ndarray, num_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py does to Q and K (pairs RoPE halves up)."""
    return (
        weights.reshape(num_heads, 2, weights.shape[0] // num_heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_gguf(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(ARCH.num_layers)
    writer.add_context_length(ARCH.max_position_embeddings)
    writer.add_embedding_length(ARCH.hidden_size)
    writer.add_feed_forward_length(ARCH.intermediate_size)
    writer.add_head_count(ARCH.num_heads)
    writer.add_head_count_kv(ARCH.num_kv_heads)
    writer.add_rope_freq_base(ARCH.rope_theta)
    writer.add_layer_norm_rms_eps(ARCH.rms_norm_eps)
    writer.add_rope_dimension_count(ARCH.head_dim)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    tokens = vocabulary()
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
    }
    layer_names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for name, tensor in tensors.items():
        array = tensor.numpy()
        if name in names:
            writer.add_tensor(names[name], array)
            continue
        _, _, layer, rest = name.split(".", 3)
        module = rest.removesuffix(".weight")
        if module == "self_attn.q_proj":
            array = llama_cpp_permute(array, ARCH.num_heads)
        elif module == "self_attn.k_proj":
            array = llama_cpp_permute(array, ARCH.num_kv_heads)
        writer.add_tensor(f"blk.{layer}.{layer_names[module]}.weight", np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Mapping[str, torch.Tensor]]:
    tensors = random_weights(ARCH, seed=11).tensors
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_gguf(path, tensors)
    return path, tensors


def last_logits(
    arch: LlamaArch, tensors: Mapping[str, torch.Tensor], token_ids: list[int]
) -> torch.Tensor:
    model = LlamaModel(arch, tensors, device=CPU, dtype=torch.float32, max_positions=64)
    kv = KVCache.allocate(arch, num_blocks=16, block_size=4, dtype=torch.float32, device=CPU)
    chunk = SequenceChunk(tuple(token_ids), 0, tuple(range(16)), True)
    return model.forward(build_forward_batch([chunk], block_size=4, device=CPU), kv)[0]


def test_a_gguf_converts_back_to_the_original_weights(
    tiny_gguf: tuple[Path, Mapping[str, torch.Tensor]], tmp_path: Path
) -> None:
    path, original = tiny_gguf

    loaded = load_model(str(path), cache_dir=tmp_path)

    # GGUF stores the epsilon as a float32.
    assert loaded.weights.arch == dataclasses.replace(ARCH, rms_norm_eps=float(np.float32(1e-5)))
    assert set(loaded.weights.tensors) == set(original)
    for name, tensor in original.items():
        assert torch.equal(loaded.weights.tensors[name], tensor), name
    assert loaded.name == "tiny-llama"


def test_our_conversion_agrees_with_transformers_gguf_loader(
    tiny_gguf: tuple[Path, Mapping[str, torch.Tensor]], tmp_path: Path
) -> None:
    path, _ = tiny_gguf
    loaded = load_model(str(path), cache_dir=tmp_path)
    reference = LlamaForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    token_ids = [5, 77, 140, 3, 250, 9, 11]

    with torch.no_grad():
        expected = reference.eval()(torch.tensor([token_ids])).logits[0, -1]
    ours = last_logits(loaded.weights.arch, loaded.weights.tensors, token_ids)

    assert_logits_close(loaded.weights.arch, ours, expected)


def test_the_gguf_tokenizer_merges_splits_digits_and_keeps_specials(
    tiny_gguf: tuple[Path, Mapping[str, torch.Tensor]], tmp_path: Path
) -> None:
    tokenizer = load_model(str(tiny_gguf[0]), cache_dir=tmp_path).tokenizer
    the = vocabulary().index("Ġthe")

    ids = tokenizer.encode("in the 42<|im_end|>", add_special_tokens=True)

    digit = vocabulary().index("4")
    assert ids == [vocabulary().index("in"), the, vocabulary().index("Ġ"), digit, digit - 2, 2]
    assert tokenizer.decode(ids) == "in the 42"
    assert tokenizer.stop_token_ids == frozenset({2})
    assert tokenizer.render_chat([]) == "<|im_start|>assistant\n"


def test_conversion_happens_once_per_file(
    tiny_gguf: tuple[Path, Mapping[str, torch.Tensor]], tmp_path: Path
) -> None:
    folder = converted_folder(tiny_gguf[0], tmp_path)
    marker_mtime = (folder / COMPLETE_MARKER).stat().st_mtime_ns

    assert converted_folder(tiny_gguf[0], tmp_path) == folder
    assert (folder / COMPLETE_MARKER).stat().st_mtime_ns == marker_mtime
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no staging folder left


def test_a_hugging_face_folder_loads_and_matches_transformers(tmp_path: Path) -> None:
    config = LlamaConfig(**ARCH.to_hf_config(), bos_token_id=1, eos_token_id=2)
    reference = LlamaForCausalLM(config).eval()
    reference.save_pretrained(tmp_path)
    TextTokenizer.byte_level().save(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML_TEMPLATE, "eos_token": "<|im_end|>"})
    )
    token_ids = [10, 20, 30, 40, 50]

    loaded = load_model(str(tmp_path), cache_dir=tmp_path / "unused")

    with torch.no_grad():
        expected = reference(torch.tensor([token_ids])).logits[0, -1]
    ours = last_logits(loaded.weights.arch, loaded.weights.tensors, token_ids)
    assert_logits_close(loaded.weights.arch, ours, expected)
    assert loaded.tokenizer.stop_token_ids == frozenset({2})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("random:huge", "unknown preset"),
        ("/no/such/model", "neither"),
    ],
)
def test_unknown_models_fail_with_a_clear_message(spec: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load_model(spec, cache_dir=tmp_path)


def test_a_folder_without_weights_fails_with_a_clear_message(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(ARCH.to_hf_config()))
    with pytest.raises(ModelLoadError, match=r"no \.safetensors"):
        load_model(str(tmp_path), cache_dir=tmp_path)
