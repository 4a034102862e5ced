"""The `deja` command.

    deja serve [--config FILE] [--host H] [--port P] [--upstream URL] [--redis URL]
               [--admin-token T] [--log-level LEVEL]
    deja modelserver [--host H] [--port P] [--model smollm2|PATH] [--device auto|cpu|cuda] ...
    deja config [--config FILE]        print the effective configuration (secrets masked)

Flags beat the environment (DEJA_<SECTION>__<KEY>), which beats the file, which beats the
defaults. This is the one place that reads os.environ.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from core.config import DejaConfig
from core.config_loader import load_config
from core.errors import ConfigError

_SECRETS = {
    ("upstream", "api_key"),
    ("cache", "tenant_secret"),
    ("admin", "token"),
    ("proxy", "api_keys"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "modelserver":
        from modelserver.cli import main as modelserver_main

        return modelserver_main(args[1:])
    parser = _parser()
    ns = parser.parse_args(args)
    if ns.command is None:
        parser.print_help()
        return 2
    try:
        config = _config_from(ns)
    except ConfigError as exc:
        print(f"deja: {exc.message}", file=sys.stderr)
        return 2
    if ns.command == "config":
        print(json.dumps(_masked(config), indent=2))
        return 0
    return _serve(config, ns.log_level)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deja", description="Deja: a semantic cache for OpenAI-compatible APIs"
    )
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the caching proxy")
    for p in (serve, sub.add_parser("config", help="print the effective configuration")):
        p.add_argument(
            "--config", help="YAML config file (default: $DEJA_CONFIG, else built-in defaults)"
        )
        p.add_argument("--host", help="address to listen on (server.host)")
        p.add_argument("--port", type=int, help="port to listen on (server.port)")
        p.add_argument("--upstream", help="upstream base URL ending in /v1 (upstream.url)")
        p.add_argument("--redis", help="redis:// URL; empty turns the Redis tier off (redis.url)")
        p.add_argument("--admin-token", help="bearer token for /admin/v1 (admin.token)")
        p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    sub.add_parser("modelserver", help="run the local model server (see `deja modelserver --help`)")
    return parser


def _config_from(ns: argparse.Namespace) -> DejaConfig:
    overrides: dict[str, dict[str, Any]] = {}
    flags = {
        ("server", "host"): ns.host,
        ("server", "port"): ns.port,
        ("upstream", "url"): ns.upstream,
        ("redis", "url"): ns.redis,
        ("admin", "token"): ns.admin_token,
    }
    for (section, key), value in flags.items():
        if value is not None:
            overrides.setdefault(section, {})[key] = value
    path = ns.config or os.environ.get("DEJA_CONFIG") or None
    return load_config(path, os.environ, overrides)


def _masked(config: DejaConfig) -> dict[str, Any]:
    data = dataclasses.asdict(config)
    for section, key in _SECRETS:
        if data[section][key]:
            data[section][key] = "***"
    return data


def _serve(config: DejaConfig, log_level: str) -> int:
    from aiohttp import web

    from proxy.app import create_app

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    app = create_app(config)
    web.run_app(
        app,
        host=config.server.host,
        port=config.server.port,
        # On SIGTERM aiohttp closes the listening socket, waits up to `shutdown_timeout` for the
        # requests in progress, then cancels them and waits up to `shutdown_timeout` again (a
        # stream being written runs on through that second wait): half the grace for each
        # keeps an in-flight stream's end within `server.shutdown_grace_s`.
        shutdown_timeout=config.server.shutdown_grace_s / 2,
        handler_cancellation=True,
        access_log=None,
        print=lambda *a: logging.getLogger("deja").info(
            "listening on http://%s:%d (upstream %s)",
            config.server.host,
            config.server.port,
            config.upstream.url,
        ),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
