"""The flags that name the proxy's configuration, shared by `deja serve`, `deja config` and
`deja doctor`: flags beat the environment (DEJA_<SECTION>__<KEY>), which beats the file
(--config, else $DEJA_CONFIG), which beats the defaults."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from core.config import DejaConfig
from core.config_loader import load_config


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", help="YAML config file (default: $DEJA_CONFIG, else built-in defaults)"
    )
    parser.add_argument("--host", help="address to listen on (server.host)")
    parser.add_argument("--port", type=int, help="port to listen on (server.port)")
    parser.add_argument(
        "--upstream", help="upstream base URL, e.g. http://host:8081/v1 (upstream.url)"
    )
    parser.add_argument("--redis", help="redis:// URL; empty turns the Redis tier off (redis.url)")
    parser.add_argument("--admin-token", help="bearer token for /admin/v1 (admin.token)")


def config_from(ns: argparse.Namespace, environ: Mapping[str, str]) -> DejaConfig:
    """The effective configuration: validated (a ConfigError names what is wrong)."""
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
    path = ns.config or environ.get("DEJA_CONFIG") or None
    return load_config(path, environ, overrides)
