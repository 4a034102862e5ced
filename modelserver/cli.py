"""`deja modelserver` / `python -m modelserver`: flags → config → load → warm up → bind → serve.

The port is bound only after the model is loaded and warmed up, so "connection refused" means
"not ready yet" and a supervisor can simply retry. This is the only module that reads flags, and
`main` the only place that reads the environment (for the cache directory's fallbacks).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from aiohttp import web

from core.settings import meta
from modelserver.config import ModelServerConfig
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


# Flags of the process that are not settings of the server.
LOG_LEVEL_FLAG = ("--log-level", "INFO", "logging level")


@dataclasses.dataclass(frozen=True, slots=True)
class Flag:
    """A setting's command-line flag: `--no-<name>` for a setting that is on by default."""

    name: str
    field: str
    kind: Any
    default: Any
    help: str
    choices: tuple[str, ...]
    negated: bool = False

    @property
    def dest(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")


def flags() -> list[Flag]:
    """One per setting of ModelServerConfig that has a flag, in declaration order."""
    hints = typing.get_type_hints(ModelServerConfig)
    found: list[Flag] = []
    for field in dataclasses.fields(ModelServerConfig):
        declared = meta(field)
        if declared.flag is None:
            continue
        kind = _flag_type(hints[field.name])
        negated = kind is bool and field.default is True
        assert kind is not bool or negated, f"{field.name}: a flag turns a setting off only"
        prefix = "--no-" if negated else "--"
        name = declared.flag or prefix + field.name.replace("_", "-")
        # Its doc says what the setting does; the flag turns that off.
        text = f"turn off: {declared.doc}" if negated else declared.doc
        choices = declared.bounds.choices
        found.append(Flag(name, field.name, kind, field.default, text, choices, negated))
    return found


def _flag_type(hint: Any) -> Any:
    """`int | None` reads as an int (None is the flag left out)."""
    options = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
    assert len(options) == 1, f"a flag cannot read {hint}"
    return options[0]


def build_parser(environ: Mapping[str, str] = _NO_ENVIRONMENT) -> argparse.ArgumentParser:
    """The flags, from the settings' declarations; `environ` supplies the defaults that come
    from the environment (the cache directory), so `--help` shows the value that applies."""
    parser = argparse.ArgumentParser(
        prog="deja modelserver",
        description="Serve a Llama-family model over an OpenAI-compatible API, with a paged KV "
        "cache and prefix reuse.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    from_environment = {"cache_dir": default_cache_dir(environ)}
    for flag in flags():
        # argparse formats help with %-interpolation.
        text = flag.help.replace("%", "%%")
        if flag.negated:
            parser.add_argument(flag.name, action="store_true", help=text)
            continue
        parser.add_argument(
            flag.name,
            dest=flag.dest,
            type=flag.kind,
            choices=flag.choices or None,
            default=from_environment.get(flag.field, flag.default),
            help=text,
        )
    name, default, text = LOG_LEVEL_FLAG
    parser.add_argument(name, default=default, help=text)
    return parser


def config_from_args(args: argparse.Namespace) -> ModelServerConfig:
    values: dict[str, Any] = {}
    for flag in flags():
        value = getattr(args, flag.dest)
        values[flag.field] = not value if flag.negated else value
    return ModelServerConfig(**values)


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
