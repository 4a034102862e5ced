"""Model server benchmark: prefix-cache TTFT and batched decode, against transformers, in one run.

    python -m bench.modelserver [--model smollm2|PATH|random:<preset>] [--device auto|cpu|cuda]
                                [--dtype auto|float32|float16|bfloat16] [--threads N] [--no-hf]

Measures, on the engine (its own thread, as the server runs it; no HTTP):

- time to first token of a prompt of a `--prefix-tokens` shared prefix plus a short suffix, with a
  cold KV cache and then with the prefix cached (a different suffix): the hit/cold ratio;
- decode tokens/s of 1 sequence and of `--concurrency` sequences decoding together;
- the same prompts through Hugging Face `generate` (cold TTFT, decode tokens/s at batch 1 and
  batch N), with the same weights, device, dtype and thread count.

Prints a table and writes JSON (default bench/results/modelserver.json). Targets: prefix-hit
TTFT at most 25% of cold; N concurrent sequences at least 3x the tokens/s of one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.harness import RESULTS
from modelserver.cli import default_cache_dir
from modelserver.config import DEVICES, DTYPES, ModelServerConfig
from modelserver.engine import Engine, GenerationOutput, GenerationRequest
from modelserver.runtime import Runtime, build_runtime, warm_up
from modelserver.sampler import SamplingParams
from modelserver.weights import LoadedModel, load_model


@dataclass
class Timeline:
    """Arrival times of one request's tokens."""

    submitted_s: float
    token_times_s: list[float] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


def run_requests(engine: Engine, prompts: list[list[int]], max_tokens: int) -> list[Timeline]:
    """Submit `prompts` together, greedy, no end-of-sequence stop; wait for all of them."""
    timelines: list[Timeline] = []
    lock = threading.Lock()
    for index, prompt in enumerate(prompts):
        timeline = Timeline(time.perf_counter())
        timelines.append(timeline)

        def sink(output: GenerationOutput, timeline: Timeline = timeline) -> None:
            assert output.error is None, output.error
            with lock:
                timeline.token_times_s.append(time.perf_counter())
            if output.finish_reason is not None:
                timeline.done.set()

        # No stop tokens: every request runs exactly max_tokens, so runs are comparable.
        sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        request_id = f"bench-{time.perf_counter_ns()}-{index}"
        engine.submit(GenerationRequest(request_id, tuple(prompt), sampling), sink)
    for timeline in timelines:
        assert timeline.done.wait(3600), "a benchmark request did not finish"
    return timelines


def ttft_s(timeline: Timeline) -> float:
    return timeline.token_times_s[0] - timeline.submitted_s


def decode_tokens_per_s(timelines: list[Timeline]) -> float:
    """Tokens per second while every sequence is decoding: from the last first-token to the first
    last-token, counting the tokens of all sequences in that window."""
    start = max(t.token_times_s[0] for t in timelines)
    end = min(t.token_times_s[-1] for t in timelines)
    tokens = sum(1 for t in timelines for s in t.token_times_s if start < s <= end)
    return tokens / (end - start)


def random_prompt(generator: torch.Generator, length: int, vocab_size: int) -> list[int]:
    # Ids from 3 up: the low ids are special tokens in the byte-level and SmolLM2 vocabularies.
    return torch.randint(3, vocab_size, (length,), generator=generator).tolist()


def bench_ours(runtime: Runtime, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    engine = runtime.engine
    generator = torch.Generator().manual_seed(0)
    cold, hit = [], []
    for _ in range(args.repeats):
        prefix = random_prompt(generator, args.prefix_tokens, vocab)
        suffixes = [random_prompt(generator, args.suffix_tokens, vocab) for _ in range(2)]
        cold.append(ttft_s(run_requests(engine, [prefix + suffixes[0]], 1)[0]))
        hit.append(ttft_s(run_requests(engine, [prefix + suffixes[1]], 1)[0]))
    decode = {}
    for concurrency in (1, args.concurrency):
        prompts = [random_prompt(generator, args.suffix_tokens, vocab) for _ in range(concurrency)]
        decode[concurrency] = decode_tokens_per_s(run_requests(engine, prompts, args.decode_tokens))
    return {
        "ttft_cold_s": statistics.median(cold),
        "ttft_hit_s": statistics.median(hit),
        "decode_tokens_per_s": decode,
    }


def bench_hf(loaded: LoadedModel, runtime: Runtime, args: argparse.Namespace) -> dict[str, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    arch = loaded.weights.arch
    model = LlamaForCausalLM(LlamaConfig(**arch.to_hf_config()))
    model.load_state_dict(dict(loaded.weights.tensors), strict=False)
    model = model.to(device=runtime.device, dtype=runtime.dtype).eval()
    generator = torch.Generator().manual_seed(0)  # the same prompts as ours
    vocab = runtime.tokenizer.vocab_size if loaded.name.startswith("random") else arch.vocab_size

    def generate(prompts: list[list[int]], new_tokens: int) -> float:
        ids = torch.tensor(prompts, device=runtime.device)
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        if runtime.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    cold = []
    for _ in range(args.repeats):
        prefix = random_prompt(generator, args.prefix_tokens, vocab)
        suffixes = [random_prompt(generator, args.suffix_tokens, vocab) for _ in range(2)]
        cold.append(generate([prefix + suffixes[0]], 1))
    decode = {}
    for concurrency in (1, args.concurrency):
        prompts = [random_prompt(generator, args.suffix_tokens, vocab) for _ in range(concurrency)]
        one = generate(prompts, 1)
        full = generate(prompts, args.decode_tokens)
        decode[concurrency] = concurrency * (args.decode_tokens - 1) / (full - one)
    return {"ttft_cold_s": statistics.median(cold), "decode_tokens_per_s": decode}


def table(ours: dict[str, Any], hf: dict[str, Any] | None, args: argparse.Namespace) -> str:
    n = args.concurrency
    ratio = ours["ttft_hit_s"] / ours["ttft_cold_s"]
    speedup = ours["decode_tokens_per_s"][n] / ours["decode_tokens_per_s"][1]

    def hf_cell(value: float | None, unit: str) -> str:
        return "n/a" if value is None else f"{value:.3g} {unit}"

    rows = [
        ("TTFT, cold", f"{ours['ttft_cold_s']:.3f} s", hf_cell(hf and hf["ttft_cold_s"], "s")),
        ("TTFT, prefix hit", f"{ours['ttft_hit_s']:.3f} s", "(no prefix cache)"),
        ("hit / cold", f"{ratio:.1%} (target <= 25%)", ""),
        (
            "decode, 1 sequence",
            f"{ours['decode_tokens_per_s'][1]:.1f} tok/s",
            hf_cell(hf and hf["decode_tokens_per_s"][1], "tok/s"),
        ),
        (
            f"decode, {n} sequences",
            f"{ours['decode_tokens_per_s'][n]:.1f} tok/s",
            hf_cell(hf and hf["decode_tokens_per_s"][n], "tok/s"),
        ),
        (
            f"{n} / 1 sequences",
            f"{speedup:.2f}x (target >= 3x)",
            ""
            if hf is None
            else f"{hf['decode_tokens_per_s'][n] / hf['decode_tokens_per_s'][1]:.2f}x",
        ),
    ]
    lines = ["| measure | Deja model server | transformers generate |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2", help="smollm2 | path | random:<preset>")
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--dtype", choices=DTYPES, default="auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--kv-cache-mib", type=int, default=512)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--prefix-tokens", type=int, default=1500)
    parser.add_argument("--suffix-tokens", type=int, default=32)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="TTFT runs (median reported)")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(os.environ))
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers baseline")
    parser.add_argument("--json", type=Path, default=RESULTS / "modelserver.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    config = ModelServerConfig(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
        kv_cache_mib=args.kv_cache_mib,
        block_size=args.block_size,
        cache_dir=args.cache_dir,
        max_num_seqs=max(16, args.concurrency),
    )
    loaded = load_model(config.model, cache_dir=config.cache_dir.expanduser())
    runtime = build_runtime(config, loaded=loaded)
    warm_up(runtime)
    runtime.engine.start()
    vocab = (
        runtime.tokenizer.vocab_size
        if loaded.name.startswith("random")
        else loaded.weights.arch.vocab_size
    )
    try:
        ours = bench_ours(runtime, args, vocab)
    finally:
        runtime.engine.stop()
    hf = None if args.no_hf else bench_hf(loaded, runtime, args)
    report = table(ours, hf, args)
    print(
        f"\n{loaded.name} on {runtime.device} ({runtime.dtype}), {args.threads} thread(s), "
        f"prefix {args.prefix_tokens} + {args.suffix_tokens} tokens, {args.decode_tokens} decoded\n"
    )
    print(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "model": loaded.name,
                "device": str(runtime.device),
                "dtype": str(runtime.dtype),
                "threads": args.threads,
                "torch": torch.__version__,
                "machine": platform.processor() or platform.machine(),
                "settings": {
                    k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                },
                "ours": ours,
                "transformers": hf,
                "ttft_hit_over_cold": ours["ttft_hit_s"] / ours["ttft_cold_s"],
                "decode_speedup": ours["decode_tokens_per_s"][args.concurrency]
                / ours["decode_tokens_per_s"][1],
                "table": report,
            },
            indent=2,
        )
    )
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
