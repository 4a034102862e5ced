"""The vectors bench.scale indexes: real MiniLM embeddings of real questions, cached, extended to a
million by a documented method.

Real: the unique prompts of ../shared/data's grouped sets (qqp-groups, clinc150, banking77:
short questions, like cache traffic), in file order, embedded once with the real MiniLM
(`load_encoder("minilm", 1)`, the proxy's own loader and arguments) and cached as
bench/cache/minilm-N.npy (gitignored; ~100-300 texts/s on a 2-core machine, so embedding is paid
once).

Extended: entry i past the real ones is a convex mixture of two real vectors a, b drawn at random,
    v = normalize((1 - t) * a + t * b + sigma * g),   t ~ U(0, MIX), g ~ N(0, I/384)
so each synthetic vector stays near a real one (t ≤ MIX keeps it closer to a than to b) with a
small isotropic perturbation. This keeps the real set's clustering (what makes HNSW on sentence
embeddings easier than on random vectors) while making every vector distinct; the recall the
bench reports on the extended set is measured against exact search on that same set, and the
table shows the real-only recall next to it so the effect of the extension is visible.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / "cache"
DATA = ROOT.parent / "shared" / "data"  # as bench/quality_data.py finds it
SOURCES = ("qqp-groups.dev.jsonl", "clinc150.dev.jsonl", "banking77.dev.jsonl")
DIM = 384
MIX = 0.3
SIGMA = 0.05


def real_prompts(limit: int, data: Path = DATA) -> list[tuple[str, str]]:
    """Up to `limit` unique (prompt, group) of the grouped sets, in file order (a group: the
    prompts that ask the same thing)."""
    seen: dict[str, str] = {}
    for name in SOURCES:
        with (data / name).open() as lines:
            for line in lines:
                row = json.loads(line)
                text = row["prompt"].strip()
                if text:
                    seen.setdefault(text, row["group"])
                if len(seen) >= limit:
                    return list(seen.items())
    return list(seen.items())


def real_texts(limit: int, data: Path = DATA) -> list[str]:
    return [text for text, _ in real_prompts(limit, data)]


def held_out(limit: int, count: int, data: Path = DATA) -> np.ndarray:
    """Indexes (into `real_prompts(limit)`) of `count` queries: the last prompt of each group
    that has another prompt among the rest, so that a query has a paraphrase to find (as a
    cache's repeated questions do) and is itself never indexed."""
    groups = [group for _, group in real_prompts(limit, data)]
    sizes: dict[str, int] = {}
    for group in groups:
        sizes[group] = sizes.get(group, 0) + 1
    last = {group: i for i, group in enumerate(groups) if sizes[group] > 1}
    chosen = sorted(last.values())
    step = max(1, len(chosen) // count)
    return np.asarray(chosen[::step][:count], dtype=np.int64)


def real_vectors(limit: int, cache: Path = CACHE, data: Path = DATA) -> np.ndarray:
    """The MiniLM vectors of `real_texts(limit)` (unit rows, float32), embedded once and cached;
    a larger cached file serves a smaller ask."""
    cache.mkdir(parents=True, exist_ok=True)
    for path in sorted(cache.glob("minilm-*.npy"), key=lambda p: int(p.stem.split("-")[1])):
        if int(path.stem.split("-")[1]) >= limit:
            return np.load(path)[:limit]
    from normalize.runtime.sentence_encoder import load_encoder

    texts = real_texts(limit, data)
    encoder = load_encoder("minilm", 1)
    rows = np.asarray(encoder.encode(texts), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    np.save(cache / f"minilm-{len(rows)}.npy", rows)
    return rows


def extend(real: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` unit vectors: the real ones first, then convex mixtures of two real vectors with a
    small perturbation, re-normalized (the module's docstring gives the formula)."""
    if n <= len(real):
        return real[:n].copy()
    extra = n - len(real)
    out = np.empty((n, real.shape[1]), dtype=np.float32)
    out[: len(real)] = real
    for start in range(0, extra, 100_000):
        count = min(100_000, extra - start)
        a = real[rng.integers(0, len(real), count)]
        b = real[rng.integers(0, len(real), count)]
        t = rng.uniform(0.0, MIX, (count, 1)).astype(np.float32)
        noise = rng.standard_normal((count, real.shape[1])).astype(np.float32)
        rows = (1 - t) * a + t * b + noise * (SIGMA / np.sqrt(real.shape[1]))
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        out[len(real) + start : len(real) + start + count] = rows
    return out


def unit_random(rng: np.random.Generator, n: int) -> np.ndarray:
    """n random unit vectors (HNSW's hardest case: no clusters), for comparison."""
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


if __name__ == "__main__":
    import sys

    wanted = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    print(real_vectors(wanted).shape)
