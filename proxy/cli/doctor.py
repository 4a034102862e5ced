"""`deja doctor`: checks what `deja serve` with the same flags needs, without starting it.

    ok    config    built-in defaults, the environment and flags: valid
    ok    port      127.0.0.1:8080 is free
    FAIL  redis     redis://127.0.0.1:6379/0: cannot connect (Connection refused)
    ok    upstream  http://127.0.0.1:8081/v1 answered GET models: 200 in 4 ms
    ok    models    loaded in 6.1 s (en: 384-dim embeddings)

Each line is printed as its check ends; the exit status is 1 when any check failed. The models
load through the loader the proxy uses (normalize/runtime); Redis is asked for `INFO server`
(the proxy needs 6.2 or later); the upstream gets one small, free request (GET models, with
`upstream.api_key` when one is set); the port is free, or held by a Deja that answers /healthz.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.config import DejaConfig
from core.errors import ConfigError, UpstreamError
from proxy.cli.admin_client import AdminError
from proxy.cli.config_flags import add_config_flags, config_from

MIN_REDIS = (6, 2)
# A doctor waits less than the proxy would: a silent upstream is a finding, not a wait.
PROBE_TIMEOUT_S = 10.0
HEALTHZ_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Verdict:
    check: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAIL':<4}  {self.check:<8}  {self.detail}"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "doctor",
        help="check the configuration, models, Redis, upstream and port",
        description="Checks what `deja serve` with the same flags needs; no proxy need run.",
    )
    add_config_flags(parser)
    parser.add_argument(
        "--skip-models", action="store_true", help="do not load the models (they take seconds)"
    )
    parser.set_defaults(run=run)


def run(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    source = ns.config or environ.get("DEJA_CONFIG") or "built-in defaults"
    try:
        config = config_from(ns, environ)
    except ConfigError as exc:
        print(Verdict("config", False, exc.message).line(), flush=True)
        raise AdminError("the configuration is invalid; the other checks need a valid one") from exc
    verdicts = [Verdict("config", True, f"{source}, the environment and flags: valid")]
    print(verdicts[0].line(), flush=True)
    # What the checks use logs its own warnings (a Redis outage, say); the verdicts say it.
    logging.disable(logging.WARNING)
    verdicts += asyncio.run(_checks(config, skip_models=ns.skip_models))
    failed = [v.check for v in verdicts if not v.ok]
    if failed:
        raise AdminError(f"{len(failed)} of {len(verdicts)} checks failed: {', '.join(failed)}")
    print(f"all {len(verdicts)} checks passed")
    return 0


async def _checks(config: DejaConfig, *, skip_models: bool) -> list[Verdict]:
    checks: list[Callable[[], Awaitable[Verdict]]] = [
        lambda: asyncio.to_thread(check_port, config),
        lambda: check_redis(config),
        lambda: check_upstream(config),
    ]
    if not skip_models:
        checks.append(lambda: check_models(config))
    verdicts = []
    for check in checks:
        verdict = await check()
        print(verdict.line(), flush=True)
        verdicts.append(verdict)
    return verdicts


# --- the checks -------------------------------------------------------------------------------


def check_port(config: DejaConfig) -> Verdict:
    host, port = config.server.host, config.server.port
    where = f"{host}:{port}"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return Verdict("port", False, f"{where}: cannot resolve {host!r} ({exc.strerror})")
    for family, kind, proto, _, address in addresses:
        # As aiohttp listens: SO_REUSEADDR, so a port in TIME_WAIT counts as free.
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    return Verdict("port", False, f"cannot listen on {where}: {exc.strerror}")
                return _held(host, port)
    return Verdict("port", True, f"{where} is free")


def _held(host: str, port: int) -> Verdict:
    """A port in use is fine when a Deja holds it (this one, already running)."""
    local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    netloc = f"[{local}]:{port}" if ":" in local else f"{local}:{port}"
    taken = f"{host}:{port} is in use by another program"
    try:
        with urllib.request.urlopen(f"http://{netloc}/healthz", timeout=HEALTHZ_TIMEOUT_S) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        exc.close()
        return Verdict("port", False, f"{taken} (its /healthz answered {exc.code})")
    except (OSError, ValueError):
        return Verdict("port", False, f"{taken} (no Deja /healthz there)")
    if body != {"status": "ok"}:
        return Verdict("port", False, f"{taken} (its /healthz is not Deja's)")
    return Verdict("port", True, f"{host}:{port} is held by a running Deja (/healthz ok)")


async def check_redis(config: DejaConfig) -> Verdict:
    if not config.redis.url:
        return Verdict("redis", True, "off (redis.url is empty): entries live in this process")
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster
    from redis.exceptions import RedisClusterException, RedisError

    cfg = config.redis
    where = _redacted(cfg.url)
    options: dict[str, Any] = {
        "socket_timeout": cfg.socket_timeout_s,
        "socket_connect_timeout": cfg.connect_timeout_s,
    }
    client: Any = None
    try:
        if cfg.cluster:
            client = RedisCluster.from_url(cfg.url, **options)
        else:
            client = aioredis.Redis.from_url(cfg.url, **options)
        info = await client.info("server")
    except (RedisError, RedisClusterException, OSError) as exc:
        return Verdict("redis", False, f"{where}: {_reason(exc)}")
    finally:
        if client is not None:
            await client.aclose()
    versions = sorted(_redis_versions(info))
    if not versions:
        return Verdict("redis", False, f"{where}: INFO server named no redis_version")
    oldest = versions[0]
    shown = "/".join(dict.fromkeys(".".join(map(str, v)) for v in versions))
    kind = "Redis Cluster" if cfg.cluster else "Redis"
    if oldest[:2] < MIN_REDIS:
        needed = ".".join(map(str, MIN_REDIS))
        return Verdict("redis", False, f"{where}: {kind} {shown}, but Deja needs {needed} or later")
    return Verdict("redis", True, f"{where}: {kind} {shown}")


def _redis_versions(info: Mapping[str, Any]) -> list[tuple[int, ...]]:
    """Each node's version: a single server's INFO, or a cluster's (node → INFO)."""
    replies = (
        [info] if "redis_version" in info else [v for v in info.values() if isinstance(v, Mapping)]
    )
    versions = []
    for reply in replies:
        text = str(reply.get("redis_version", ""))
        numbers = tuple(int(part) for part in text.split(".") if part.isdigit())
        if numbers:
            versions.append(numbers)
    return versions


async def check_upstream(config: DejaConfig) -> Verdict:
    from proxy.upstream.aiohttp_transport import AiohttpTransport
    from proxy.upstream.client import UpstreamClient, UpstreamRequest

    u = dataclasses.replace(
        config.upstream,
        first_byte_timeout_s=min(config.upstream.first_byte_timeout_s, PROBE_TIMEOUT_S),
        read_timeout_s=min(config.upstream.read_timeout_s, PROBE_TIMEOUT_S),
    )
    headers = (("Authorization", f"Bearer {u.api_key}"),) if u.api_key else ()
    client = UpstreamClient(u, AiohttpTransport(u))
    started = time.monotonic()
    await client.start()
    try:
        async with await client.open(
            UpstreamRequest("GET", "models", headers, b""), retry=False
        ) as response:
            status = response.status
            await response.read()
    except UpstreamError as exc:
        return Verdict("upstream", False, f"{u.url}: {exc.message}")
    finally:
        await client.close()
    took = f"{status} in {(time.monotonic() - started) * 1000:.0f} ms"
    if 200 <= status < 300:
        return Verdict("upstream", True, f"{u.url} answered GET models: {took}")
    if status in (401, 403):
        if u.api_key:
            return Verdict("upstream", False, f"{u.url} refused upstream.api_key: {took}")
        return Verdict(
            "upstream", True, f"{u.url} answered GET models: {took} (clients' keys go through)"
        )
    if status >= 500:
        return Verdict("upstream", False, f"{u.url} is failing: GET models answered {took}")
    return Verdict("upstream", True, f"{u.url} is reachable (GET models answered {took})")


async def check_models(config: DejaConfig) -> Verdict:
    if not config.semantic.enabled:
        return Verdict("models", True, "none to load (semantic.enabled is off)")
    from normalize.runtime.model_features import SemanticFeatureSource

    # One embedding worker is enough to know the models load.
    source = SemanticFeatureSource(dataclasses.replace(config.semantic, embedding_workers=1))
    started = time.monotonic()
    try:
        await source.start()
        dims = source.dims
    except Exception as exc:  # noqa: BLE001 - whatever stops a model loading is this check's verdict
        return Verdict("models", False, f"could not load: {exc}")
    finally:
        await source.close()
    took = time.monotonic() - started
    loaded = ", ".join(f"{language}: {dim}-dim embeddings" for language, dim in dims.items())
    return Verdict("models", True, f"loaded in {took:.1f} s ({loaded}; lemma analysis)")


def _reason(exc: BaseException) -> str:
    """ "cannot connect (Connection refused)" for a socket error under redis-py's wording."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            return f"cannot connect ({os.strerror(cause.errno)})"
        cause = cause.__cause__
    return str(exc) or type(exc).__name__


def _redacted(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urllib.parse.urlunsplit(parts._replace(netloc=user + netloc))
