"""`deja modelserver` / `python -m modelserver`: flags → config → load → warm up → bind → serve.

The port is bound only after the model is loaded and warmed up, so "connection refused" means
"not ready yet" and a supervisor can simply retry. This is the only module that reads flags, and
`main` the only place that reads the environment (for the cache directory's fallbacks).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from aiohttp import web

from modelserver.config import DEVICES, DTYPES, ModelServerConfig
from modelserver.errors import ModelServerError
from modelserver.runtime import Runtime, build_runtime, warm_up
from modelserver.server import create_app

logger = logging.getLogger("modelserver")

_DEFAULTS = ModelServerConfig()
_NO_ENVIRONMENT: Mapping[str, str] = MappingProxyType({})

# The one cache directory, documented in docs/modelserver.md: containers set the variable (their
# system user has no home), desktops follow the XDG base-directory convention.
CACHE_DIR_VARIABLE = "DEJA_MODEL_CACHE_DIR"


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    """$DEJA_MODEL_CACHE_DIR, else $XDG_CACHE_HOME/deja/models, else ~/.cache/deja/models.

    An empty variable counts as unset, as the XDG specification says of its own."""
    if environ.get(CACHE_DIR_VARIABLE):
        return Path(environ[CACHE_DIR_VARIABLE])
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "deja" / "models"
    return _DEFAULTS.cache_dir


def build_parser(environ: Mapping[str, str] = _NO_ENVIRONMENT) -> argparse.ArgumentParser:
    """The flags; `environ` supplies the defaults that come from the environment (the cache
    directory), so `--help` shows the value that applies."""
    parser = argparse.ArgumentParser(
        prog="deja modelserver",
        description="Serve a Llama-family model over an OpenAI-compatible API, with a paged KV "
        "cache and prefix reuse.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--host", default=_DEFAULTS.host, help="interface to bind")
    add("--port", type=int, default=_DEFAULTS.port, help="port to bind (0: any free port)")
    add(
        "--model",
        default=_DEFAULTS.model,
        help="smollm2 | path to a .gguf | path to a Hugging Face folder | random:<preset>",
    )
    add("--device", choices=DEVICES, default=_DEFAULTS.device, help="auto: CUDA when present")
    add(
        "--dtype",
        choices=DTYPES,
        default=_DEFAULTS.dtype,
        help="auto: float32 on CPU, bfloat16 on CUDA",
    )
    add(
        "--kv-cache-mib",
        type=int,
        default=_DEFAULTS.kv_cache_mib,
        help="memory budget of the KV block pool",
    )
    add(
        "--kv-cache-blocks",
        type=int,
        default=None,
        help="exact number of KV blocks (overrides --kv-cache-mib)",
    )
    add("--block-size", type=int, default=_DEFAULTS.block_size, help="tokens per KV block")
    add(
        "--max-batch",
        type=int,
        default=_DEFAULTS.max_num_seqs,
        help="most sequences computed in one step",
    )
    add(
        "--max-batch-tokens",
        type=int,
        default=_DEFAULTS.max_batch_tokens,
        help="most tokens computed in one step (longer prompts are prefilled in chunks)",
    )
    add(
        "--max-model-len",
        type=int,
        default=None,
        help="longest prompt + completion (default: the model's, capped by the KV pool)",
    )
    add(
        "--default-max-tokens",
        type=int,
        default=_DEFAULTS.default_max_tokens,
        help="completion length when a request sets none",
    )
    add(
        "--default-temperature",
        type=float,
        default=_DEFAULTS.default_temperature,
        help="temperature when a request sets none (SmolLM2's model card: 0.2)",
    )
    add(
        "--default-top-p",
        type=float,
        default=_DEFAULTS.default_top_p,
        help="top_p when a request sets none (the model card: 0.9)",
    )
    add(
        "--default-repetition-penalty",
        type=float,
        default=_DEFAULTS.default_repetition_penalty,
        help="repetition penalty when a request sets none (1: off)",
    )
    add(
        "--max-waiting",
        type=int,
        default=_DEFAULTS.max_waiting_requests,
        help="requests allowed to wait for admission before 429",
    )
    add("--threads", type=int, default=_DEFAULTS.threads, help="torch intra-op threads")
    add(
        "--cache-dir",
        type=Path,
        default=default_cache_dir(environ),
        help=f"where converted GGUF weights are cached (${CACHE_DIR_VARIABLE}, else "
        "$XDG_CACHE_HOME/deja/models, else ~/.cache/deja/models)",
    )
    add("--served-model-name", default=None, help="model name in the API (default: derived)")
    add("--no-warmup", action="store_true", help="bind without a warm-up generation")
    add("--log-level", default="INFO", help="logging level")
    return parser


def config_from_args(args: argparse.Namespace) -> ModelServerConfig:
    return ModelServerConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        kv_cache_mib=args.kv_cache_mib,
        kv_cache_blocks=args.kv_cache_blocks,
        block_size=args.block_size,
        max_num_seqs=args.max_batch,
        max_batch_tokens=args.max_batch_tokens,
        max_model_len=args.max_model_len,
        default_max_tokens=args.default_max_tokens,
        default_temperature=args.default_temperature,
        default_top_p=args.default_top_p,
        default_repetition_penalty=args.default_repetition_penalty,
        max_waiting_requests=args.max_waiting,
        threads=args.threads,
        cache_dir=args.cache_dir,
        served_model_name=args.served_model_name,
        warmup=not args.no_warmup,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser(os.environ).parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = config_from_args(args)
        runtime = build_runtime(config)
        if config.warmup:
            warm_up(runtime)
    except ModelServerError as exc:
        print(f"deja modelserver: {exc.message}", file=sys.stderr)
        return 2
    asyncio.run(serve(config, runtime))
    return 0


async def serve(config: ModelServerConfig, runtime: Runtime) -> None:
    """Bind, serve until SIGINT/SIGTERM, then stop the engine and close connections."""
    # handler_cancellation: a client that disconnects cancels its handler, which aborts its
    # request and frees its KV blocks at once instead of after max_tokens.
    runner = web.AppRunner(create_app(config, runtime), handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    for address in runner.addresses:
        host, port = address[0], address[1]
        logger.info("serving %s at http://%s:%d/v1", runtime.model_name, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
