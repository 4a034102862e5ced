"""How long after a client's answer another replica can serve it.

Two `deja serve` processes share one Redis in front of the stub upstream. For each of `--questions`
new questions, a client asks replica A (a miss) and takes the time its answer arrived; then replica
B is polled until it

- holds the entry (`GET /admin/v1/entries/{id}` is 200: B's tiers, i.e. the Redis record), and
- with the semantic tier on, has indexed it (its `semantic_entries` went up: the replication
  event reached B, which loaded the entry from Redis and added it to its FAISS index).

Both delays are measured from the moment A's answer arrived. A stores an answer after it went out
(the in-process copy at once; the Redis record, the semantic index and the one replication event
once the answer's embedding is in), so these are the delays a client that moves between replicas
can see.

    python -m bench.replica_delay [--questions 20] [--semantic on|off] [--poll-ms 2]

Prints a table and one JSON line (seconds: median, p90, max of each delay).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from tests.support.blocking_http import Reply, http
from tests.support.processes import ServerProcess, proxy
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import stub_argv

TOKEN = "replica-delay-admin"
KEY = "sk-replica-delay"


def ask(server: ServerProcess, question: str) -> Reply:
    body = {"model": "m", "messages": [{"role": "user", "content": question}]}
    return http(server, "POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {KEY}"})


def admin(server: ServerProcess, path: str) -> Reply:
    return http(server, "GET", f"/admin/v1/{path}", None, {"Authorization": f"Bearer {TOKEN}"})


def semantic_entries(server: ServerProcess) -> int:
    return int(admin(server, "stats").body["sizes"]["semantic_entries"])


def seconds_until(
    checks: dict[str, Callable[[], bool]], since: float, poll_s: float, limit_s: float
) -> dict[str, float]:
    """Seconds from `since` until each check first held, all polled in one loop (so one that
    holds early is not timed late behind another); the bench fails past `limit_s`."""
    found: dict[str, float] = {}
    while len(found) < len(checks):
        for name, check in checks.items():
            if name not in found and check():
                found[name] = time.perf_counter() - since
        now = time.perf_counter()
        assert now - since < limit_s, f"not reached within {limit_s} s: {set(checks) - set(found)}"
        time.sleep(poll_s)
    return found


def summary(delays_s: list[float]) -> dict[str, float]:
    ordered = sorted(delays_s)
    return {
        "median_s": round(statistics.median(ordered), 4),
        "p90_s": round(ordered[int(0.9 * (len(ordered) - 1))], 4),
        "max_s": round(ordered[-1], 4),
    }


def measure(a: ServerProcess, b: ServerProcess, args: argparse.Namespace) -> dict[str, Any]:
    poll_s = args.poll_ms / 1000
    delays: dict[str, list[float]] = {"entry_on_b": [], "indexed_on_b": []}
    for i in range(args.questions + 1):  # the first one warms both replicas up, uncounted
        question = f"What is the tallest mountain in country number {i}?"
        before = semantic_entries(b) if args.semantic == "on" else 0
        reply = ask(a, question)
        answered = time.perf_counter()
        assert reply.headers["X-Deja-Cache"] == "miss", reply.headers
        entry_id = reply.headers["X-Deja-Entry"]
        path = f"entries/{entry_id}"
        checks = {"entry_on_b": lambda path=path: admin(b, path).status == 200}
        if args.semantic == "on":
            checks["indexed_on_b"] = lambda before=before: semantic_entries(b) > before
        found = seconds_until(checks, answered, poll_s, 10.0)
        if i > 0:
            for name, seconds in found.items():
                delays[name].append(seconds)
    result: dict[str, Any] = {"questions": args.questions, "semantic": args.semantic}
    for name, seconds in delays.items():
        if seconds:
            result[name] = summary(seconds)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--semantic", choices=("on", "off"), default="on")
    parser.add_argument("--poll-ms", type=float, default=2.0)
    args = parser.parse_args()
    env = {
        "DEJA_ADMIN__TOKEN": TOKEN,
        "DEJA_SERVER__ACCESS_LOG": "false",
        "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
        "DEJA_SEMANTIC__ENABLED": "true" if args.semantic == "on" else "false",
    }
    redis = RedisServer()
    redis.start()
    port = free_port()
    stub = ServerProcess("stub", stub_argv(port), port)
    replicas: list[ServerProcess] = []
    try:
        stub.wait_ready("/v1/models", timeout_s=30)
        replicas = [proxy(f"{stub.url}/v1", redis.url, env) for _ in range(2)]
        for replica in replicas:
            replica.wait_ready(timeout_s=300)
        result = measure(replicas[0], replicas[1], args)
    finally:
        for replica in replicas:
            replica.stop()
        stub.stop()
        redis.close()
    print(f"{'delay after A answered':<28} {'median':>8} {'p90':>8} {'max':>8}")
    for name in ("entry_on_b", "indexed_on_b"):
        if name in result:
            row = result[name]
            print(
                f"{name:<28} {row['median_s'] * 1000:>6.1f}ms {row['p90_s'] * 1000:>6.1f}ms"
                f" {row['max_s'] * 1000:>6.1f}ms"
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
