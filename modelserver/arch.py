"""`LlamaArch`: the shape of a Llama-family model, and the presets used for random weights.

One frozen value read from a Hugging Face `config.json` (or written into one when a GGUF is
converted), passed to the weight loader, the forward pass and the KV pool sizing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelserver.errors import ModelLoadError

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """Frequency scaling for long-context Llama variants (`rope_scaling` in config.json)."""

    rope_type: str
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True, slots=True)
class LlamaArch:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    rope_scaling: RopeScaling | None = None
    attention_bias: bool = False
    mlp_bias: bool = False

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ModelLoadError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}) for grouped-query attention"
            )
        if self.head_dim % 2:
            raise ModelLoadError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.rope_scaling is not None and self.rope_scaling.rope_type not in (
            SUPPORTED_ROPE_TYPES
        ):
            raise ModelLoadError(
                f"rope type {self.rope_scaling.rope_type!r} is not supported "
                f"(supported: {SUPPORTED_ROPE_TYPES})"
            )

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV cache bytes one token takes across all layers (keys and values)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> LlamaArch:
        """Read a Hugging Face `config.json` of a Llama-family model."""
        model_type = config.get("model_type", "llama")
        if model_type not in ("llama", "mistral"):
            raise ModelLoadError(f"model_type {model_type!r} is not a Llama-family model")
        if config.get("hidden_act", "silu") != "silu":
            raise ModelLoadError(f"hidden_act {config['hidden_act']!r} is not supported (silu)")
        try:
            num_heads = int(config["num_attention_heads"])
            hidden_size = int(config["hidden_size"])
            rope_theta, rope_scaling = _read_rope(config)
            return cls(
                vocab_size=int(config["vocab_size"]),
                hidden_size=hidden_size,
                intermediate_size=int(config["intermediate_size"]),
                num_layers=int(config["num_hidden_layers"]),
                num_heads=num_heads,
                num_kv_heads=int(config.get("num_key_value_heads") or num_heads),
                head_dim=int(config.get("head_dim") or hidden_size // num_heads),
                rope_theta=rope_theta,
                rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
                max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                rope_scaling=rope_scaling,
                attention_bias=bool(config.get("attention_bias", False)),
                mlp_bias=bool(config.get("mlp_bias", False)),
            )
        except KeyError as exc:
            raise ModelLoadError(f"config.json lacks {exc.args[0]!r}") from exc

    def to_hf_config(self) -> dict[str, Any]:
        """The `config.json` Hugging Face transformers reads for this shape."""
        config: dict[str, Any] = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_act": "silu",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "mlp_bias": self.mlp_bias,
        }
        if self.rope_scaling is not None:
            config["rope_scaling"] = {
                "rope_type": self.rope_scaling.rope_type,
                "factor": self.rope_scaling.factor,
                "low_freq_factor": self.rope_scaling.low_freq_factor,
                "high_freq_factor": self.rope_scaling.high_freq_factor,
                "original_max_position_embeddings": (
                    self.rope_scaling.original_max_position_embeddings
                ),
            }
        return config


def _read_rope(config: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    # transformers 5 writes `rope_parameters` (theta inside); older configs have `rope_theta` and
    # an optional `rope_scaling`. Both spell the same thing.
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", config.get("rope_theta", 10_000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    return theta, RopeScaling(
        rope_type=str(rope_type),
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(params.get("original_max_position_embeddings", 8192)),
    )


PRESETS: dict[str, LlamaArch] = {
    # Small enough that scheduler and pool tests run a step in about a millisecond, with the same
    # grouped-query layout as SmolLM2 (3 query heads per KV head).
    "tiny": LlamaArch(
        vocab_size=300,
        hidden_size=48,
        intermediate_size=96,
        num_layers=2,
        num_heads=6,
        num_kv_heads=2,
        head_dim=8,
        rope_theta=10_000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    ),
    "smollm2-135m": LlamaArch(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=100_000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    ),
}
