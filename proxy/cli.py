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
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, NoReturn

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
        # `validate` finds every configuration error here, before anything starts; the same
        # line for one that only building the app finds (an invariant it should have held).
        config = _config_from(ns)
        if ns.command == "config":
            print(json.dumps(_masked(config), indent=2))
            return 0
        if ns.worker_socket:
            return _serve_worker(config, ns.log_level, ns.worker_socket)
        if config.server.edge:
            return _serve_edge(config, ns.log_level, args)
        return _serve(config, ns.log_level)
    except ConfigError as exc:
        print(f"deja: {exc.message}", file=sys.stderr)
        return 2


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr, as a configuration error is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="deja", description="Deja: a semantic cache for OpenAI-compatible APIs")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the caching proxy")
    for p in (serve, sub.add_parser("config", help="print the effective configuration")):
        p.add_argument(
            "--config", help="YAML config file (default: $DEJA_CONFIG, else built-in defaults)"
        )
        p.add_argument("--host", help="address to listen on (server.host)")
        p.add_argument("--port", type=int, help="port to listen on (server.port)")
        p.add_argument(
            "--upstream", help="upstream base URL, e.g. http://host:8081/v1 (upstream.url)"
        )
        p.add_argument("--redis", help="redis:// URL; empty turns the Redis tier off (redis.url)")
        p.add_argument("--admin-token", help="bearer token for /admin/v1 (admin.token)")
        p.add_argument(
            "--log-level",
            default="INFO",
            type=str.upper,
            choices=("DEBUG", "INFO", "WARNING", "ERROR"),
            help="DEBUG, INFO, WARNING, ERROR",
        )
    # Edge mode's worker (proxy/edge/worker_process.py): started by the front, not by hand.
    serve.add_argument("--worker-socket", help=argparse.SUPPRESS)
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
    from proxy.composition.app import create_app

    _set_up_process(log_level)
    _run(create_app(config), config, host=config.server.host, port=config.server.port)
    return 0


def _serve_edge(config: DejaConfig, log_level: str, args: Sequence[str]) -> int:
    """Edge mode: this process answers exact hits and relays the rest to a worker process
    (proxy/edge/front.py) on a unix socket in a private directory."""
    from proxy.edge.front import create_edge_app
    from proxy.edge.worker_link import WorkerLink
    from proxy.edge.worker_process import WorkerProcess

    _set_up_process(log_level)
    folder = tempfile.mkdtemp(prefix="deja-edge-")  # mode 0700: the front's user only
    socket_path = os.path.join(folder, "worker.sock")
    worker = WorkerProcess(args, socket_path)
    try:
        app = create_edge_app(config, WorkerLink(socket_path), worker)
        _run(app, config, host=config.server.host, port=config.server.port)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if worker.failed else 0


def _serve_worker(config: DejaConfig, log_level: str, socket_path: str) -> int:
    from proxy.composition.app import create_app
    from proxy.edge.worker_process import settle_as_worker

    parent = os.getppid()
    _set_up_process(log_level)
    settle_as_worker(config.server.edge_worker_idle)
    _run(create_app(config, edge_worker=True), config, path=socket_path)
    if os.getppid() != parent:
        # The front was killed before it could remove the socket's private directory.
        shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)
    return 0


def _set_up_process(log_level: str) -> None:
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _run(
    app: Any, config: DejaConfig, *, host: str = "", port: int = 0, path: str | None = None
) -> None:
    from aiohttp import web

    where = f"unix:{path}" if path else f"http://{host}:{port}"
    web.run_app(
        app,
        host=None if path else host,
        port=None if path else port,
        path=path,
        # On SIGTERM aiohttp closes the listening socket, waits up to `shutdown_timeout` for the
        # requests in progress, then cancels them and waits up to `shutdown_timeout` again (a
        # stream being written runs on through that second wait): half the grace for each
        # keeps an in-flight stream's end within `server.shutdown_grace_s`.
        shutdown_timeout=config.server.shutdown_grace_s / 2,
        handler_cancellation=True,
        access_log=None,
        print=lambda *a: logging.getLogger("deja").info(
            "listening on %s (upstream %s%s)",
            where,
            config.upstream.url,
            ", edge mode" if config.server.edge else "",
        ),
    )


if __name__ == "__main__":
    raise SystemExit(main())
