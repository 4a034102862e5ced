"""A real Redis Cluster on loopback: six redis-server nodes, three masters with a replica each.

Built with `redis-cli --cluster create … --cluster-replicas 1`, as an operator would. Each node
also listens on its cluster bus port, port + 10000, so the ports are searched below 55535 with
both free. The node timeout is short (a master is failed over about a second after it dies),
and replicas sync without a disk snapshot, so the cluster is up in a few seconds.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

# Cluster bus port = port + 10000, and ports end at 65535.
_BUS_OFFSET = 10_000
_PORT_RANGE = (20_000, 65_535 - _BUS_OFFSET)
NODE_TIMEOUT_MS = 1000
MASTERS = 3


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(count: int) -> list[int]:
    """`count` ports, each free along with its bus port, none another's bus port."""
    chosen: list[int] = []
    taken: set[int] = set()
    rng = random.Random()
    while len(chosen) < count:
        port = rng.randint(*_PORT_RANGE)
        pair = {port, port + _BUS_OFFSET}
        if pair & taken or not (_bindable(port) and _bindable(port + _BUS_OFFSET)):
            continue
        chosen.append(port)
        taken |= pair
    return chosen


@dataclass
class ClusterNode:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self) -> redis.Redis:
        """A client of this node alone; use it in a `with` block, which closes its socket."""
        return redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2)


class RedisClusterNodes:
    """Six local nodes forming one cluster; `kill` a master to fail it over, `revive` it to have
    it rejoin as a replica."""

    def __init__(self) -> None:
        binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        assert binary and cli, (
            "redis-server and redis-cli are not installed (scripts/ensure-system.sh installs them)"
        )
        self._binary, self._cli = binary, cli
        self._root = Path(tempfile.mkdtemp(prefix="deja-cluster-"))
        self.nodes = [
            ClusterNode(port, self._root / str(port)) for port in free_cluster_ports(MASTERS * 2)
        ]

    @property
    def url(self) -> str:
        """One node's URL: the client discovers the others from it (`redis.cluster: true`)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> None:
        for node in self.nodes:
            node.directory.mkdir()
            self._spawn(node)
        for node in self.nodes:
            _wait_for_ping(node)
        subprocess.run(
            [
                self._cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        self.wait_healthy()

    def _spawn(self, node: ClusterNode) -> None:
        node.process = subprocess.Popen(
            [
                self._binary,
                "--port", str(node.port),
                "--bind", "127.0.0.1",
                "--dir", str(node.directory),
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                # A replica may always take over, however long it was cut off: in a test
                # the point is to see the failover, not the data-age safety check.
                "--cluster-replica-validity-factor", "0",
                "--save", "",
                "--appendonly", "no",
                "--repl-diskless-sync", "yes",
                "--repl-diskless-sync-delay", "0",
                "--protected-mode", "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def wait_healthy(self, timeout_s: float = 30.0, *, replicated: bool = True) -> None:
        """Every live node says cluster_state:ok and knows three masters with their slots;
        `replicated`: and every master has a replica whose link is up (so a failover can
        happen)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(_healthy(node, replicated) for node in self.nodes if node.alive):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the cluster did not become healthy in {timeout_s} s")

    def masters(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.alive and _role(n) == "master"]

    def master_of(self, key: str) -> ClusterNode:
        """The live node serving `key`'s slot now."""
        with next(n for n in self.nodes if n.alive).client() as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
        for node in self.masters():
            ranges = _own_slots(node)
            if any(lo <= slot <= hi for lo, hi in ranges):
                return node
        raise AssertionError(f"no live master serves slot {slot}")

    def flush(self) -> None:
        """Empty every master (replicas follow)."""
        for node in self.masters():
            with node.client() as client:
                client.flushall()

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL: a crash, not a shutdown (nothing is handed over)."""
        assert node.process is not None
        node.process.kill()
        node.process.wait(timeout=10)
        node.process = None

    def revive(self, node: ClusterNode) -> None:
        """Start a killed node again from its nodes.conf; it rejoins as a replica."""
        assert node.process is None, "still running"
        self._spawn(node)
        _wait_for_ping(node)
        self.wait_healthy()

    def close(self) -> None:
        for node in self.nodes:
            if node.alive:
                self.kill(node)
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> RedisClusterNodes:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wait_for_ping(node: ClusterNode, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with node.client() as client:
                if client.ping():
                    return
        except redis.RedisError:
            time.sleep(0.02)
    raise RuntimeError(f"redis-server did not start on port {node.port}")


def _info(node: ClusterNode, section: str) -> dict[str, str]:
    with node.client() as client:
        return {k: str(v) for k, v in client.info(section).items()}


def _role(node: ClusterNode) -> str:
    return _info(node, "replication").get("role", "")


def _healthy(node: ClusterNode, replicated: bool) -> bool:
    try:
        with node.client() as client:
            cluster = client.execute_command("CLUSTER", "INFO")
        text = cluster.decode() if isinstance(cluster, bytes) else str(cluster)
        state = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if state.get("cluster_state") != "ok" or state.get("cluster_size") != str(MASTERS):
            return False
        replication = _info(node, "replication")
    except redis.RedisError:
        return False
    if replication.get("role") == "slave":
        return replication.get("master_link_status") == "up"
    # A master without slots is a node `--cluster create` has not made a replica yet.
    return bool(_own_slots(node)) and (
        not replicated or int(replication.get("connected_slaves", "0")) >= 1
    )


def _own_slots(node: ClusterNode) -> list[tuple[int, int]]:
    """The slot ranges `node` itself serves, from its own CLUSTER NODES line."""
    with node.client() as client:
        raw = client.execute_command("CLUSTER", "NODES")
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    for line in text.splitlines():
        parts = line.split()
        if "myself" in parts[2]:
            ranges = []
            for item in parts[8:]:
                if item.startswith("["):
                    continue  # a slot being migrated
                lo, _, hi = item.partition("-")
                ranges.append((int(lo), int(hi or lo)))
            return ranges
    return []
