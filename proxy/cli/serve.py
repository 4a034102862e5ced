"""`deja serve` and `deja config`: the proxy itself, and its effective configuration.

    deja serve [--config FILE] [--host H] [--port P] [--upstream URL] [--redis URL]
               [--admin-token T] [--log-level LEVEL]
    deja config [--config FILE] [same flags]   print the effective configuration (secrets masked)

Flags beat the environment (DEJA_<SECTION>__<KEY>), which beats the file, which beats the
defaults. `deja doctor` reads the configuration through the same flags (`add_config_flags`).
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
from collections.abc import Mapping, Sequence
from typing import Any

from core.config import DejaConfig
from proxy.cli.config_flags import add_config_flags, config_from

_SECRETS = {
    ("upstream", "api_key"),
    ("cache", "tenant_secret"),
    ("admin", "token"),
    ("proxy", "api_keys"),
}


def register(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the caching proxy")
    add_config_flags(serve)
    serve.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="DEBUG, INFO, WARNING, ERROR",
    )
    # Edge mode's worker (proxy/edge/worker_process.py): started by the front, not by hand.
    serve.add_argument("--worker-socket", help=argparse.SUPPRESS)
    serve.set_defaults(run=run_serve)
    config = sub.add_parser("config", help="print the effective configuration (secrets masked)")
    add_config_flags(config)
    config.add_argument("--log-level", help=argparse.SUPPRESS)  # accepted, as serve's flags
    config.set_defaults(run=run_config)


def run_config(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    print(json.dumps(_masked(config_from(ns, environ)), indent=2))
    return 0


def run_serve(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    config = config_from(ns, environ)
    if ns.worker_socket:
        return _serve_worker(config, ns.log_level, ns.worker_socket)
    if config.server.edge:
        return _serve_edge(config, ns.log_level, ns.argv)
    return _serve(config, ns.log_level)


def _masked(config: DejaConfig) -> dict[str, Any]:
    data = dataclasses.asdict(config)
    for section, key in _SECRETS:
        if data[section][key]:
            data[section][key] = "***"
    return data


def _serve(config: DejaConfig, log_level: str) -> int:
    from proxy.composition.app import create_app

    _set_up_process(log_level)
    app = create_app(config, access_log_stream=sys.stderr.buffer)
    _run(app, config, host=config.server.host, port=config.server.port)
    return 0


def _serve_edge(config: DejaConfig, log_level: str, args: Sequence[str]) -> int:
    """Edge mode: this process answers exact hits and relays the rest to a worker process
    (proxy/edge/front.py) on a unix socket in a private directory."""
    from proxy.composition.app import create_edge_app
    from proxy.edge.worker_link import WorkerLink
    from proxy.edge.worker_process import WorkerProcess

    _set_up_process(log_level)
    folder = tempfile.mkdtemp(prefix="deja-edge-")  # mode 0700: the front's user only
    socket_path = os.path.join(folder, "worker.sock")
    worker = WorkerProcess(args, socket_path)
    try:
        app = create_edge_app(
            config, WorkerLink(socket_path), worker, access_log_stream=sys.stderr.buffer
        )
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
    app = create_app(config, edge_worker=True, access_log_stream=sys.stderr.buffer)
    _run(app, config, path=socket_path)
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
