"""Composition: from a `ModelServerConfig` to a ready `Runtime` (model, KV pool, scheduler, engine).

Everything is built here once, at start-up, and handed to the HTTP layer; nothing is created
lazily while serving.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from core.sentence_encoder import SentenceEncoder, default_model_path, load_sentence_model
from modelserver.block_pool import BlockPool
from modelserver.config import ModelServerConfig
from modelserver.embeddings import EmbeddingModel
from modelserver.engine import Engine, GenerationOutput, GenerationRequest
from modelserver.errors import ConfigError
from modelserver.kv_cache import KVCache, num_blocks_for_budget
from modelserver.model import LlamaModel
from modelserver.prefix_cache import PrefixCache
from modelserver.sampler import SamplingParams
from modelserver.scheduler import Scheduler
from modelserver.tokenizer import TextTokenizer
from modelserver.weights import LoadedModel, load_model

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class Runtime:
    engine: Engine
    tokenizer: TextTokenizer
    model_name: str
    max_model_len: int
    device: torch.device
    dtype: torch.dtype
    num_blocks: int
    block_size: int
    block_pool: BlockPool
    """Owned by the engine thread; others may read it only while the engine is idle (tests)."""
    embeddings: EmbeddingModel | None = None
    """`/v1/embeddings`' model; None with `embeddings` off."""


def resolve_device(name: str) -> torch.device:
    """`auto` is CUDA whenever torch sees a GPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for, but torch sees no GPU")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def build_runtime(
    config: ModelServerConfig,
    loaded: LoadedModel | None = None,
    sentence_encoder: SentenceEncoder | None = None,
) -> Runtime:
    """Load the model and, with `embeddings` on, the sentence-transformer (unless given), and
    build everything around them."""
    # Process-wide, set once at start: see ModelServerConfig.threads.
    torch.set_num_threads(config.threads)
    if loaded is None:
        started = time.monotonic()
        loaded = load_model(
            config.model, cache_dir=Path(config.cache_dir), random_seed=config.random_seed
        )
        logger.info("loaded %s in %.1f s", loaded.name, time.monotonic() - started)
    arch = loaded.weights.arch
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    num_blocks = config.kv_cache_blocks or num_blocks_for_budget(
        arch, block_size=config.block_size, dtype=dtype, budget_bytes=config.kv_cache_bytes
    )
    # A sequence must fit the pool alone, or the scheduler could never finish it.
    max_model_len = min(
        config.max_model_len or arch.max_position_embeddings, num_blocks * config.block_size
    )
    model = LlamaModel(
        arch, loaded.weights.tensors, device=device, dtype=dtype, max_positions=max_model_len
    )
    kv_cache = KVCache.allocate(
        arch, num_blocks=num_blocks, block_size=config.block_size, dtype=dtype, device=device
    )
    block_pool = BlockPool(num_blocks)
    prefix_cache = PrefixCache(block_pool, config.block_size)
    scheduler = Scheduler(
        prefix_cache,
        max_num_seqs=config.max_num_seqs,
        max_batch_tokens=config.max_batch_tokens,
        max_model_len=max_model_len,
    )
    engine = Engine(
        model,
        kv_cache,
        prefix_cache,
        scheduler,
        max_model_len=max_model_len,
        max_live_requests=config.max_num_seqs + config.max_waiting_requests,
        seed_source=lambda: secrets.randbits(63),
        clock=time.monotonic,
    )
    logger.info(
        "%s on %s (%s): KV pool of %d blocks x %d tokens (%.0f MiB), max_model_len %d",
        loaded.name,
        device,
        str(dtype).removeprefix("torch."),
        num_blocks,
        config.block_size,
        kv_cache.nbytes / 2**20,
        max_model_len,
    )
    return Runtime(
        embeddings=_embedding_model(config, sentence_encoder),
        engine=engine,
        tokenizer=loaded.tokenizer,
        model_name=config.served_model_name or loaded.name,
        max_model_len=max_model_len,
        device=device,
        dtype=dtype,
        num_blocks=num_blocks,
        block_size=config.block_size,
        block_pool=block_pool,
    )


def _embedding_model(
    config: ModelServerConfig, encoder: SentenceEncoder | None
) -> EmbeddingModel | None:
    if not config.embeddings:
        return None
    if encoder is None:
        started = time.monotonic()
        encoder = load_sentence_model(default_model_path(), config.threads)
        logger.info("loaded all-MiniLM-L6-v2 in %.1f s", time.monotonic() - started)
    return EmbeddingModel(encoder, config.embedding_model_name)


def warm_up(runtime: Runtime) -> None:
    """Generate a few tokens on the calling thread before the engine thread starts, so kernels
    and allocators are initialised before the first client arrives."""
    outputs: list[GenerationOutput] = []
    prompt = runtime.tokenizer.encode("Hello", add_special_tokens=True) or [0]
    runtime.engine.submit(
        GenerationRequest(
            "warmup",
            tuple(prompt),
            SamplingParams(temperature=0.0, max_tokens=4),
            cache_salt="deja-warmup",
        ),
        outputs.append,
    )
    runtime.engine.run_until_idle()
    assert outputs and outputs[-1].finish_reason is not None, "the warm-up generation did not end"
