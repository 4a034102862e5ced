"""Which proxy the admin commands talk to: --url / DEJA_URL, --token / DEJA_ADMIN_TOKEN.

The token's variable is the one `deja serve` reads for `admin.token` (its alias
DEJA_ADMIN_TOKEN, or DEJA_ADMIN__TOKEN), so one environment configures both sides. A proxy
URL ending in /v1 (what OpenAI clients are given) works as well as the bare host and port.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from proxy.cli.admin_client import DEFAULT_URL, AdminError, Target

URL_ENV = "DEJA_URL"
TOKEN_ENVS = ("DEJA_ADMIN_TOKEN", "DEJA_ADMIN__TOKEN")
DEFAULT_TIMEOUT_S = 30.0


def add_client_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("which proxy")
    group.add_argument(
        "--url", help=f"the proxy's base URL (default: ${URL_ENV}, else {DEFAULT_URL})"
    )
    group.add_argument(
        "--token", help="the admin token (default: $DEJA_ADMIN_TOKEN, else $DEJA_ADMIN__TOKEN)"
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up on a proxy silent this long (default {DEFAULT_TIMEOUT_S:g})",
    )


def target_from(ns: argparse.Namespace, environ: Mapping[str, str], *, api_key: str = "") -> Target:
    """Flags beat the environment, which beats the default. With a client's `api_key` (feedback
    on its own entries) no admin token is sent."""
    url = ns.url or environ.get(URL_ENV) or DEFAULT_URL
    token = "" if api_key else ns.token
    if token is None:
        token = next((environ[name] for name in TOKEN_ENVS if environ.get(name)), "")
    if ns.timeout <= 0:
        raise AdminError("--timeout must be more than 0 seconds")
    if not token and not api_key:
        raise AdminError("no admin token given: pass --token or set DEJA_ADMIN_TOKEN")
    return Target(url=url, token=token, api_key=api_key, timeout_s=ns.timeout)
