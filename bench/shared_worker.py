"""Light sidecars, shared workers: what a front costs, what the TCP relay adds, and what a
front still serves with its workers down.

    python -m bench.shared_worker [--misses N] [--entries N] [--no-models]

1. Memory: a front (`deja serve` with `edge.worker_urls`) and a shared worker (`deja serve
   --role worker`, semantic tier on: its models), RSS summed over each one's processes (psutil),
   after misses, a semantic hit and exact hits through the front.
2. The relay's added latency on a miss, same run, semantic tier off everywhere (so a miss is
   the proxy's own work and the stub upstream's): sequential misses through the whole proxy
   (one process), edge mode with its worker on a unix socket, and a front relaying over TCP to
   a shared worker; medians and p90s, and the ratios to the whole proxy.
3. With the worker killed: the share of exact repeats the front still answers as hits, what
   the new prompts got (straight upstream, marked), and whether anything was a 5xx.

Writes bench/results/shared_worker.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psutil

from bench.harness import print_table, write_json
from tests.support.processes import ServerProcess, proxy
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv

SECRET = "bench-shared-secret-0123456789"
KEY = "sk-bench"
QUIET = {
    "DEJA_SERVER__ACCESS_LOG": "false",
    "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
    "DEJA_SERVER__EDGE_WORKER_IDLE": "false",
    "DEJA_EDGE__SHARED_SECRET": SECRET,
}


class Client:
    """One keep-alive connection, as an application's SDK keeps one."""

    def __init__(self, server: ServerProcess) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)

    def ask(self, question: str) -> tuple[int, dict[str, str], float]:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": question}]})
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
        started = time.perf_counter()
        self._conn.request("POST", "/v1/chat/completions", body, headers)
        response = self._conn.getresponse()
        response.read()
        elapsed = time.perf_counter() - started
        return response.status, dict(response.getheaders()), elapsed

    def close(self) -> None:
        self._conn.close()


def rss_mib(pid: int) -> float:
    """RSS of `pid` and every process under it, MiB."""
    root = psutil.Process(pid)
    total = 0
    for each in [root, *root.children(recursive=True)]:
        try:
            total += each.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def shared_worker(upstream: str, redis: str, env: dict[str, str]) -> ServerProcess:
    port = free_port()
    argv = [sys.executable, "-m", "proxy.cli", "serve", "--role", "worker"]
    argv += ["--upstream", upstream, "--redis", redis]
    full = {
        "DEJA_CACHE__TENANT_SECRET": "test",
        "DEJA_EDGE__WORKER_LISTEN": f"127.0.0.1:{port}",
        **QUIET,
        **env,
    }
    return ServerProcess("worker", argv, port, full)


def front_of(worker: ServerProcess, upstream: str, redis: str) -> ServerProcess:
    env = {
        **QUIET,
        "DEJA_SERVER__EDGE": "true",
        "DEJA_EDGE__WORKER_URLS": f"tcp://127.0.0.1:{worker.port}",
    }
    return proxy(upstream, redis, env)


@dataclass
class Stack:
    redis: RedisServer
    stub: ServerProcess

    @property
    def upstream(self) -> str:
        return f"{self.stub.url}/v1"


def memory(stack: Stack, models: bool) -> dict[str, Any]:
    worker = shared_worker(
        stack.upstream, stack.redis.url, {"DEJA_SEMANTIC__ENABLED": str(models).lower()}
    )
    front: ServerProcess | None = None
    try:
        worker.wait_ready(timeout_s=600)
        front = front_of(worker, stack.upstream, stack.redis.url)
        front.wait_ready(timeout_s=60)
        client = Client(front)
        try:
            for i in range(20):
                client.ask(f"Memory probe question number {i}: what is {i} squared?")
            client.ask("Who wrote Pride and Prejudice?")
            time.sleep(2.0)  # stored
            client.ask("Who is the author of Pride and Prejudice?")
            for _ in range(20):
                client.ask("Memory probe question number 3: what is 3 squared?")
        finally:
            client.close()
        time.sleep(1.0)
        return {
            "semantic": models,
            "front_rss_mib": rss_mib(front.proc.pid),
            "worker_rss_mib": rss_mib(worker.proc.pid),
        }
    finally:
        if front is not None:
            front.stop()
        worker.stop()


def miss_latencies(server: ServerProcess, label: str, n: int) -> list[float]:
    client = Client(server)
    try:
        for i in range(5):  # connections, first-call paths
            client.ask(f"warm-up {label} {i} {time.time()}")
        out = []
        for i in range(n):
            status, headers, elapsed = client.ask(f"{label} miss {i} at {time.time_ns()}")
            assert status == 200 and headers.get("X-Deja-Cache") == "miss", (status, headers)
            out.append(elapsed * 1000)
        return out
    finally:
        client.close()


def relay_latency(stack: Stack, n: int) -> dict[str, Any]:
    off = {"DEJA_SEMANTIC__ENABLED": "false"}
    started: list[ServerProcess] = []
    try:
        whole = proxy(stack.upstream, stack.redis.url, {**QUIET, **off})
        local = proxy(
            stack.upstream, stack.redis.url, {**QUIET, **off, "DEJA_SERVER__EDGE": "true"}
        )
        worker = shared_worker(stack.upstream, stack.redis.url, off)
        started += [whole, local, worker]
        for each in started:
            each.wait_ready(timeout_s=120)
        front = front_of(worker, stack.upstream, stack.redis.url)
        started.append(front)
        front.wait_ready(timeout_s=60)
        setups = {"whole proxy": whole, "edge, unix socket": local, "front, TCP": front}
        samples: dict[str, list[float]] = {k: [] for k in setups}
        # Interleaved rounds: the machine's noise falls on all three alike.
        for round_ in range(5):
            for label, server in setups.items():
                samples[label] += miss_latencies(server, f"{label} r{round_}", max(1, n // 5))
        return {label: summary(values) for label, values in samples.items()}
    finally:
        for each in started:
            each.stop()


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "median_ms": statistics.median(ordered),
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
    }


def workers_down(stack: Stack, entries: int) -> dict[str, Any]:
    worker = shared_worker(stack.upstream, stack.redis.url, {"DEJA_SEMANTIC__ENABLED": "false"})
    front: ServerProcess | None = None
    try:
        worker.wait_ready(timeout_s=120)
        front = front_of(worker, stack.upstream, stack.redis.url)
        front.wait_ready(timeout_s=60)
        client = Client(front)
        try:
            questions = [f"Down-time question {i}: what is {i} plus {i}?" for i in range(entries)]
            for q in questions:
                client.ask(q)
            time.sleep(2.0)  # the worker stores after it answers
            before = Counter(client.ask(q)[1].get("X-Deja-Cache") for q in questions)
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait()
            repeats = [client.ask(q) for q in questions]
            new = [client.ask(f"Never asked {i}?") for i in range(entries)]
        finally:
            client.close()
        hits = sum(
            1 for status, h, _ in repeats if status == 200 and h.get("X-Deja-Cache") == "hit"
        )
        marked = sum(
            1
            for status, h, _ in new
            if status == 200 and h.get("X-Deja-Degraded") == "worker-unreachable"
        )
        statuses = Counter(status for status, _, _ in repeats + new)
        return {
            "entries": entries,
            "hits_before_kill": before.get("hit", 0),
            "exact_hit_rate_down": hits / entries,
            "exact_hit_rate_up": before.get("hit", 0) / entries,
            "new_prompts_marked_upstream": marked / entries,
            "statuses": dict(statuses),
            "repeat_median_ms": statistics.median(e * 1000 for _, _, e in repeats),
            "new_median_ms": statistics.median(e * 1000 for _, _, e in new),
        }
    finally:
        if front is not None:
            front.stop()
        worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", type=int, default=200)
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--no-models", action="store_true", help="memory without the models")
    args = parser.parse_args()
    redis = RedisServer()
    redis.start()
    port = free_port()
    stub = ServerProcess("stub", stub_argv(port), port)
    try:
        stub.wait_ready("/v1/models", timeout_s=30)
        stack = Stack(redis, stub)
        results = {
            "memory": memory(stack, models=not args.no_models),
            "relay": relay_latency(stack, args.misses),
            "workers_down": workers_down(stack, args.entries),
        }
    finally:
        stub.stop()
        redis.close()
    report(results)
    print(f"wrote {write_json('shared_worker', results)}")


def report(results: dict[str, Any]) -> None:
    m = results["memory"]
    print_table(
        "Memory (RSS, MiB, summed over each one's processes)",
        ["front (sidecar)", "shared worker", "semantic tier", "worker / front"],
        [
            [
                m["front_rss_mib"],
                m["worker_rss_mib"],
                m["semantic"],
                m["worker_rss_mib"] / m["front_rss_mib"],
            ]
        ],
    )
    relay = results["relay"]
    base = relay["whole proxy"]["median_ms"]
    unix = relay["edge, unix socket"]["median_ms"]
    rows = [
        [label, s["n"], s["median_ms"], s["p90_ms"], s["median_ms"] / base, s["median_ms"] - base]
        for label, s in relay.items()
    ]
    print_table(
        "A miss (stub upstream), sequential",
        ["setup", "n", "median ms", "p90 ms", "× whole proxy", "added ms"],
        rows,
    )
    tcp = relay["front, TCP"]["median_ms"]
    print(f"TCP relay vs unix-socket relay: {tcp / unix:.2f}× the median ({tcp - unix:+.2f} ms)")
    d = results["workers_down"]
    print_table(
        "With the worker killed",
        ["entries", "exact-hit rate up", "exact-hit rate down", "new prompts marked", "statuses"],
        [
            [
                d["entries"],
                d["exact_hit_rate_up"],
                d["exact_hit_rate_down"],
                d["new_prompts_marked_upstream"],
                d["statuses"],
            ]
        ],
    )


if __name__ == "__main__":
    main()
