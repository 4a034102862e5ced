"""The fleet a soak runs against: three `deja serve` processes with the semantic tier (real
models) on one Redis or on a six-node Redis Cluster, in front of the stub upstream process.

Each proxy is a slot: a restart replaces the process in its slot (the slot is `down` meanwhile,
so the load skips it as a load balancer would) and starts its generation's clock again, from
which its RSS and its partitions are judged. RSS is the sum over the proxy's process tree
(psutil: the process and all its descendants).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
import redis

from tests.support.processes import ServerProcess, proxy
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv

TOKEN = "soak-admin"
ENV = {
    "DEJA_ADMIN__TOKEN": TOKEN,
    "DEJA_SERVER__ACCESS_LOG": "false",
    "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
    "DEJA_SEMANTIC__ENABLED": "true",
}


@dataclass
class Slot:
    """One proxy of the fleet and what is known about its current process."""

    index: int
    server: ServerProcess
    generation: int = 0
    ready_at: float = 0.0  # monotonic seconds its current process became ready
    down: bool = False
    # (seconds since the soak started, RSS bytes) of the current generation.
    rss: list[tuple[float, int]] = field(default_factory=list)
    # The same samples per process of the tree ("proxy" and each child's name and pid): which
    # process grew, when the sum did.
    rss_parts: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    # Partition tags this generation was asked about (from the entry ids it answered with).
    tags: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def tree_rss(pid: int) -> dict[str, int]:
    """RSS of a process ("proxy") and each of its descendants ("<name> <pid>"), in bytes
    (empty once it is gone)."""
    try:
        root = psutil.Process(pid)
        parts = {"proxy": int(root.memory_info().rss)}
        for child in root.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                parts[f"{_role(child)} {child.pid}"] = int(child.memory_info().rss)
        return parts
    except psutil.NoSuchProcess:
        return {}


def _role(process: psutil.Process) -> str:
    """A child's name: the role a model worker names itself by (deja-<kind>-<n>, its kernel
    name), else the last word of its command line that names a module or role."""
    with contextlib.suppress(psutil.Error):
        if process.name().startswith("deja-"):
            return process.name()
        if any("resource_tracker" in word for word in process.cmdline()):
            return "multiprocessing resource tracker"
        words = [w for w in process.cmdline() if not w.startswith("-")]
        if words:
            return words[-1].rsplit("/", 1)[-1][:40]
    return process.name()


class Fleet:
    def __init__(
        self, backend: str, proxies: int = 3, lifetime_s: tuple[float, float] | None = None
    ) -> None:
        """`lifetime_s`: the entries' (TTL, stale grace), else the config's defaults."""
        assert backend in ("single", "cluster"), backend
        self.backend = backend
        self.redis: RedisServer | RedisClusterNodes = (
            RedisClusterNodes() if backend == "cluster" else RedisServer()
        )
        self.env = {**ENV, "DEJA_REDIS__CLUSTER": str(backend == "cluster").lower()}
        if lifetime_s is not None:
            self.env["DEJA_TTL__BASE_TTL_S"] = str(lifetime_s[0])
            self.env["DEJA_DEGRADE__STALE_GRACE_S"] = str(lifetime_s[1])
        self.stub: ServerProcess | None = None
        self.slots: list[Slot] = []
        self._proxies = proxies

    def start(self) -> Fleet:
        try:
            self.redis.start()
            port = free_port()
            self.stub = ServerProcess("stub", stub_argv(port), port)
            self.stub.wait_ready("/v1/models", timeout_s=30)
            # One after the other: models loading at once on a small machine each take longer.
            for index in range(self._proxies):
                server = self._spawn()
                self.slots.append(Slot(index, server, ready_at=time.monotonic()))
        except BaseException:
            self.close()
            raise
        return self

    def _spawn(self) -> ServerProcess:
        assert self.stub is not None
        server = proxy(f"{self.stub.url}/v1", self.redis.url, self.env)
        try:
            server.wait_ready(timeout_s=600)
        except BaseException:
            server.stop()
            raise
        return server

    def restart(self, slot: Slot) -> float:
        """Stops the slot's proxy (SIGTERM) and starts a new one; seconds it was down."""
        started = time.monotonic()
        with slot.lock:
            slot.down = True
        slot.server.stop()
        server = self._spawn()
        with slot.lock:
            slot.server = server
            slot.generation += 1
            slot.ready_at = time.monotonic()
            slot.rss = []
            slot.rss_parts = []
            slot.tags = set()
            slot.down = False
        return time.monotonic() - started

    def live(self) -> list[Slot]:
        return [slot for slot in self.slots if not slot.down]

    def sample_rss(self, since: float) -> None:
        for slot in self.live():
            parts = tree_rss(slot.server.proc.pid)
            if parts:
                at = time.monotonic() - since
                slot.rss.append((at, sum(parts.values())))
                slot.rss_parts.append((at, parts))

    def redis_client(self) -> Any:
        cls = redis.RedisCluster if self.backend == "cluster" else redis.Redis
        return cls.from_url(self.redis.url)

    def close(self) -> None:
        for slot in self.slots:
            slot.server.stop()
        if self.stub is not None:
            self.stub.stop()
        self.redis.close()
