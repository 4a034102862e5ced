"""`deja serve` and `deja config`: the proxy itself, and its effective configuration.

    deja serve [--config FILE] [--host H] [--port P] [--upstream URL] [--redis URL]
               [--admin-token T] [--log-level LEVEL] [--role proxy|worker]
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
import ssl
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
    ("edge", "shared_secret"),
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
    serve.add_argument(
        "--role",
        choices=("proxy", "worker"),
        default="proxy",
        help="worker: a shared edge worker, on edge.worker_listen, for fronts holding"
        ' edge.shared_secret (README, "Shared workers")',
    )
    # Edge mode's worker (proxy/edge/worker_process.py): started by the front, not by hand.
    serve.add_argument("--worker-socket", help=argparse.SUPPRESS)
    serve.set_defaults(run=run_serve)
    config = sub.add_parser("config", help="print the effective configuration (secrets masked)")
    add_config_flags(config)
    config.add_argument("--log-level", help=argparse.SUPPRESS)  # accepted, as serve's flags
    config.add_argument("--role", help=argparse.SUPPRESS)
    config.set_defaults(run=run_config)


def run_config(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    print(json.dumps(_masked(config_from(ns, environ)), indent=2))
    return 0


def run_serve(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    config = config_from(ns, environ)
    if ns.worker_socket:
        return _serve_worker(config, ns.log_level, ns.worker_socket)
    if ns.role == "worker":
        return _serve_shared_worker(config, ns.log_level)
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
    from proxy.edge.worker_link import UnixRoute, WorkerLink
    from proxy.edge.worker_process import WorkerProcess

    _set_up_process(log_level)
    if config.edge.worker_urls:
        return _serve_front(config)
    folder = tempfile.mkdtemp(prefix="deja-edge-")  # mode 0700: the front's user only
    socket_path = os.path.join(folder, "worker.sock")
    worker = WorkerProcess(args, socket_path)
    try:
        app = create_edge_app(
            config, WorkerLink(UnixRoute(socket_path)), worker, access_log_stream=sys.stderr.buffer
        )
        _run(app, config, host=config.server.host, port=config.server.port)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if worker.failed else 0


def _serve_front(config: DejaConfig) -> int:
    """A light front relaying to the shared workers of `edge.worker_urls` (it starts none)."""
    from core.clock import SystemClock
    from proxy.composition.app import create_edge_app
    from proxy.composition.parts import shared_worker_link

    link = shared_worker_link(config, SystemClock())
    app = create_edge_app(config, link, None, access_log_stream=sys.stderr.buffer)
    fronted = ", ".join(config.edge.worker_urls)
    _run(
        app,
        config,
        host=config.server.host,
        port=config.server.port,
        role=f"edge front of the shared workers {fronted}",
    )
    return 0


def _serve_shared_worker(config: DejaConfig, log_level: str) -> int:
    """`deja serve --role worker`: the whole proxy for the fronts holding the shared secret,
    on `edge.worker_listen` (TLS with `edge.tls_cert`)."""
    from core.config_checks import listen_address
    from core.errors import ConfigError
    from proxy.composition.app import create_app

    edge = config.edge
    if not edge.shared_secret:
        raise ConfigError("--role worker needs edge.shared_secret (fronts must hold the same)")
    address = listen_address(edge.worker_listen)
    assert not isinstance(address, str), f"edge.worker_listen is validated: {address}"
    _set_up_process(log_level)
    app = create_app(
        config,
        edge_worker=True,
        shared_secret=edge.shared_secret,
        access_log_stream=sys.stderr.buffer,
    )
    tls = _server_tls(config)
    _run(app, config, host=address[0], port=address[1], tls=tls, role="shared edge worker")
    return 0


def _server_tls(config: DejaConfig) -> ssl.SSLContext | None:
    if not config.edge.tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.edge.tls_cert, config.edge.tls_key)
    return context


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
    app: Any,
    config: DejaConfig,
    *,
    host: str = "",
    port: int = 0,
    path: str | None = None,
    tls: ssl.SSLContext | None = None,
    role: str = "",
) -> None:
    from aiohttp import web

    mode = f", {role}" if role else (", edge mode" if config.server.edge else "")
    where = f"unix:{path}" if path else f"{'https' if tls else 'http'}://{host}:{port}"
    web.run_app(
        app,
        host=None if path else host,
        port=None if path else port,
        path=path,
        ssl_context=tls,
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
            mode,
        ),
    )
