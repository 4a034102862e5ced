"""Semantic path latency and throughput, and whether exact hits wait behind it.

Three measurements, each a ratio against a baseline taken in the same run:

1. The whole semantic path of one prompt (lemma analysis ∥ embedding, then a FAISS search of a
   populated partition with the meaning guards) at concurrency 1, p50, against a bare
   `SentenceTransformer.encode()` of the same text.            target: ≤ 1.5×
2. Semantic lookups per second at concurrency 32 against concurrency 1 (micro-batching of the
   embeddings).                                                 target: ≥ 2.5×
3. Through a real proxy process: exact-key hit p99 while 32 concurrent semantic lookups run,
   against the exact-hit p99 with no other load.                 target: ≤ 2×

    python bench/semantic_latency.py [--prompts 400] [--index 2000]
Prompts come from Banking77 (../shared/data), which the cache has not seen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.harness import (
    PYTHON,
    Process,
    free_port,
    pinned,
    print_table,
    run_wrk,
    write_json,
    wrk_post_script,
)
from core.clock import SystemClock
from core.config import SemanticConfig, VerifyConfig
from normalize.fingerprint import fingerprint
from normalize.guards import MeaningGuard
from normalize.request import Route
from normalize.semantic_features import SemanticFeatureSource
from tiers.base import Entry
from tiers.semantic import SemanticTier
from tiers.stats import CacheStats
from tiers.thresholds import ThresholdController

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "banking77.dev.jsonl"


def load_prompts(n: int, skip: int = 0) -> list[str]:
    prompts = [json.loads(line)["prompt"] for line in DATA.read_text().splitlines() if line.strip()]
    seen: set[str] = set()
    unique = [p for p in prompts if not (p in seen or seen.add(p))]
    return unique[skip : skip + n]


async def in_process(prompts: list[str], index_prompts: list[str]) -> dict[str, Any]:
    import torch
    from sentence_transformers import SentenceTransformer

    from normalize.embedder import default_model_path

    config = SemanticConfig()
    features = SemanticFeatureSource(config)
    await features.start()
    thresholds = ThresholdController(VerifyConfig(), config.threshold)
    tier = SemanticTier(config, MeaningGuard(config), thresholds, SystemClock(), CacheStats())
    tier.set_dimension(features.dim)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    partition = fingerprint(Route.CHAT, body, "bench", "").partition
    # A populated partition to search: other Banking77 prompts, analysed and embedded.
    analysed = await asyncio.gather(*(features.process.analyze(text) for text in index_prompts))
    for i, (parsed, vector) in enumerate(analysed):
        await tier.add(
            Entry(
                entry_id=f"{partition[:16]}-{i:08x}",
                route=Route.CHAT,
                tenant="bench",
                namespace="",
                model="m",
                partition=partition,
                exact_key=f"{partition[:16]}{i:032x}",
                lemma_key=None,
                body=b"{}",
                stored_at=time.time(),
                ttl_s=3600,
                grace_s=0,
                analysis=parsed.wire,
                vector=vector.astype("float32").tobytes(),
            )
        )
    # The baseline: a bare encode() of the same text, one thread, as Deja's worker runs it.
    torch.set_num_threads(1)
    model = SentenceTransformer(str(default_model_path()), device="cpu")

    async def semantic_path(text: str) -> float:
        started = time.perf_counter()
        parsed, vector = await features.process.analyze(text)
        await tier.search(partition, vector, features.prompt_analysis(partition, parsed).analysis)
        return time.perf_counter() - started

    bare = []
    for text in prompts:
        started = time.perf_counter()
        model.encode(text, normalize_embeddings=True)
        bare.append(time.perf_counter() - started)
    path = [await semantic_path(text) for text in prompts]
    started = time.perf_counter()
    for text in prompts:
        await semantic_path(text)
    serial_rate = len(prompts) / (time.perf_counter() - started)
    semaphore = asyncio.Semaphore(32)

    async def bounded(text: str) -> float:
        async with semaphore:
            return await semantic_path(text)

    started = time.perf_counter()
    await asyncio.gather(*(bounded(text) for text in prompts))
    concurrent_rate = len(prompts) / (time.perf_counter() - started)
    await features.close()
    await tier.close()
    return {
        "encode_p50_ms": statistics.median(bare) * 1000,
        "semantic_path_p50_ms": statistics.median(path) * 1000,
        "path_over_encode": statistics.median(path) / statistics.median(bare),
        "lookups_per_s_c1": serial_rate,
        "lookups_per_s_c32": concurrent_rate,
        "c32_over_c1": concurrent_rate / serial_rate,
        "index_entries": len(index_prompts),
    }


async def through_proxy(prompts: list[str], warm: list[str], duration_s: float) -> dict[str, Any]:
    """Exact-hit latency measured by wrk (its own process, one connection), first alone, then
    while this process keeps 32 semantic lookups going: Banking77 prompts the cache has not
    seen, against a cache warmed with other Banking77 prompts, so some hit semantically and the
    rest go upstream. The proxy runs on core 0; wrk, the stub upstream and this load generator
    on core 1 at a lower priority, as if they were other machines (on two cores, a Python load
    generator otherwise takes the proxy's CPU and the bench measures itself)."""
    stub_port, proxy_port = free_port(), free_port()
    stub = Process(
        "stub", pinned(1, ["nice", "-n", "10", PYTHON, "bench/stub_server.py", str(stub_port)])
    )
    proxy = Process(
        "proxy",
        pinned(
            0,
            [
                PYTHON,
                "-m",
                "proxy.cli",
                "serve",
                "--port",
                str(proxy_port),
                "--upstream",
                f"http://127.0.0.1:{stub_port}/v1",
            ],
        ),
        env={"DEJA_CACHE__TENANT_SECRET": "bench", "DEJA_SERVER__ACCESS_LOG": "false"},
    )
    url = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
    exact = {
        "model": "m",
        "messages": [{"role": "user", "content": "What is the exchange rate for a card payment?"}],
    }
    script = wrk_post_script(json.dumps(exact).encode())
    try:
        proxy.wait_http(f"http://127.0.0.1:{proxy_port}/readyz", timeout_s=300)
        async with aiohttp.ClientSession() as session:

            async def ask(body: dict[str, Any]) -> str:
                async with session.post(url, json=body) as response:
                    await response.read()
                    return response.headers.get("X-Deja-Cache", "")

            if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
                os.sched_setaffinity(0, {1})
            os.nice(10)
            warming = list(warm)

            async def warm_up() -> None:
                while warming:
                    await ask(
                        {"model": "m", "messages": [{"role": "user", "content": warming.pop()}]}
                    )

            await asyncio.gather(*(warm_up() for _ in range(32)))
            await ask(exact)
            assert await ask(exact) == "hit"
            quiet = await asyncio.to_thread(run_wrk, url, script, 1, duration_s, 1)
            queue = list(prompts)
            stop = asyncio.Event()
            done = 0
            outcomes: dict[str, int] = {}

            async def semantic_load() -> None:
                nonlocal done
                while queue and not stop.is_set():
                    text = queue.pop()
                    async with session.post(
                        url, json={"model": "m", "messages": [{"role": "user", "content": text}]}
                    ) as response:
                        await response.read()
                        headers = response.headers
                        kind = f"{headers.get('X-Deja-Cache')}/{headers.get('X-Deja-Match', '-')}"
                    outcomes[kind] = outcomes.get(kind, 0) + 1
                    done += 1

            loaders = [asyncio.create_task(semantic_load()) for _ in range(32)]
            await asyncio.sleep(1.0)
            before = done
            loaded = await asyncio.to_thread(run_wrk, url, script, 1, duration_s, 1)
            during = done - before
            stop.set()
            await asyncio.gather(*loaders)
    finally:
        proxy.close()
        stub.close()
    return {
        "exact_hit_p99_ms_quiet": quiet.p99_ms,
        "exact_hit_p99_ms_loaded": loaded.p99_ms,
        "exact_hit_p50_ms_quiet": quiet.p50_ms,
        "exact_hit_p50_ms_loaded": loaded.p50_ms,
        "loaded_over_quiet": loaded.p99_ms / quiet.p99_ms,
        "semantic_lookups_during_loaded_run": during,
        "load_outcomes": outcomes,
        "exact_hits_quiet_loaded": [quiet.requests, loaded.requests],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=400)
    parser.add_argument("--index", type=int, default=2000)
    parser.add_argument("--duration-s", type=float, default=8.0)
    args = parser.parse_args()
    prompts = load_prompts(args.prompts)
    index = load_prompts(args.index, skip=args.prompts)
    part1 = asyncio.run(in_process(prompts, index))
    part2 = asyncio.run(
        through_proxy(
            load_prompts(args.prompts, skip=args.prompts + args.index), index, args.duration_s
        )
    )
    rows = [
        [
            "semantic path p50 / bare encode p50",
            f"{part1['semantic_path_p50_ms']:.1f} / {part1['encode_p50_ms']:.1f} ms",
            part1["path_over_encode"],
            "≤ 1.5",
            part1["path_over_encode"] <= 1.5,
        ],
        [
            "lookups/s at c=32 / c=1",
            f"{part1['lookups_per_s_c32']:.0f} / {part1['lookups_per_s_c1']:.0f}",
            part1["c32_over_c1"],
            "≥ 2.5",
            part1["c32_over_c1"] >= 2.5,
        ],
        [
            "exact-hit p99 under semantic load / quiet",
            f"{part2['exact_hit_p99_ms_loaded']:.1f} / {part2['exact_hit_p99_ms_quiet']:.1f} ms",
            part2["loaded_over_quiet"],
            "≤ 2",
            part2["loaded_over_quiet"] <= 2,
        ],
    ]
    print_table(
        "Semantic latency (this machine, one run)",
        ["measure", "values", "ratio", "target", "met"],
        rows,
    )
    path = write_json("semantic_latency", {"in_process": part1, "through_proxy": part2})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
