"""Embeddings through Deja: a batch of 100 inputs sent straight to the upstream (the baseline)
against the same batch through a `deja serve` process with none, 60 or all of its inputs cached.

The upstream is the stub (tests/support/stub_process.py) with a fixed delay per call standing for
a provider's round trip (`--upstream-delay-s`, 0.05 by default); the proxy runs with Redis. Each
round sends every scenario once with fresh texts (so "60 cached" has 60 of its 100 stored the
round before), in the same order, and each ratio is taken against the same round's baseline, so
the shared machine's load between rounds does not read as a difference. The table gives the
median over the rounds of each scenario's latency, its ratio to the baseline, and the inputs the
upstream received per batch.

    python -m bench.embeddings_cache [--rounds 15] [--upstream-delay-s 0.05] [--dimensions 1536]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from openai import OpenAI

from bench.harness import print_table, write_json
from tests.support.processes import proxy
from tests.support.redis_server import RedisServer
from tests.support.stub_process import StubProcess

MODEL = "text-embedding-3-small"
BATCH = 100
SCENARIOS = ("upstream direct", "Deja, none cached", "Deja, 60 cached", "Deja, all cached")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--upstream-delay-s", type=float, default=0.05)
    parser.add_argument("--dimensions", type=int, default=1536)
    args = parser.parse_args()
    stub = StubProcess(delay_s=args.upstream_delay_s).start()
    with RedisServer() as redis:
        front = proxy(stub.base_url, redis.url, env={"DEJA_SEMANTIC__ENABLED": "false"})
        try:
            front.wait_ready()
            with (
                OpenAI(base_url=stub.base_url, api_key="sk", max_retries=0) as direct,
                OpenAI(base_url=f"{front.url}/v1", api_key="sk", max_retries=0) as through,
            ):
                results = measure(args, stub, direct, through)
        finally:
            front.stop()
            stub.stop()
    rows = [
        [name, r["median_ms"], r["ratio_to_direct"], r["upstream_inputs_per_batch"]]
        for name, r in results.items()
    ]
    print_table(
        f"A batch of {BATCH} embeddings ({args.dimensions} dimensions), {args.rounds} rounds,"
        f" upstream delay {args.upstream_delay_s * 1000:.0f} ms",
        ["scenario", "median ms", "× direct", "upstream inputs / batch"],
        rows,
    )
    path = write_json("embeddings_cache", {"args": vars(args), "results": results})
    print(f"\nwrote {path}")


def measure(
    args: argparse.Namespace, stub: StubProcess, direct: OpenAI, through: OpenAI
) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in SCENARIOS}
    ratios: dict[str, list[float]] = {name: [] for name in SCENARIOS}
    inputs: dict[str, list[int]] = {name: [] for name in SCENARIOS}

    def batch(round_no: int, tag: str, start: int = 0) -> list[str]:
        return [f"round {round_no} {tag} text {i}" for i in range(start, start + BATCH)]

    for round_no in range(args.rounds + 1):  # round 0 warms both up, and is not counted
        # The 60-cached batch: 60 texts stored now, 40 new when it is sent.
        embed(through, batch(round_no, "partial")[:60], args.dimensions)
        embed(through, batch(round_no, "hit"), args.dimensions)
        plan: list[tuple[str, OpenAI, list[str]]] = [
            ("upstream direct", direct, batch(round_no, "direct")),
            ("Deja, none cached", through, batch(round_no, "miss")),
            ("Deja, 60 cached", through, batch(round_no, "partial")),
            ("Deja, all cached", through, batch(round_no, "hit")),
        ]
        elapsed: dict[str, float] = {}
        for name, client, texts in plan:
            before = stub.embedding_counts()[1]
            elapsed[name] = timed(lambda c=client, t=texts: embed(c, t, args.dimensions))
            if round_no:
                inputs[name].append(stub.embedding_counts()[1] - before)
        if not round_no:
            continue
        for name in SCENARIOS:
            times[name].append(elapsed[name] * 1000)
            ratios[name].append(elapsed[name] / elapsed["upstream direct"])
    return {
        name: {
            "median_ms": statistics.median(times[name]),
            "ratio_to_direct": statistics.median(ratios[name]),
            "upstream_inputs_per_batch": statistics.median(inputs[name]),
        }
        for name in SCENARIOS
    }


def embed(client: OpenAI, texts: list[str], dimensions: int) -> None:
    result = client.embeddings.create(model=MODEL, input=texts, dimensions=dimensions)
    assert len(result.data) == len(texts)


def timed(call: Callable[[], None]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
