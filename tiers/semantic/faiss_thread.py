"""A worker thread for FAISS calls made off the event loop: searches of large indexes, rebuilds.

FAISS releases the GIL while it searches or builds, so a call in a thread leaves the event loop
free to serve hits meanwhile. Two settings are per thread, which is why this class exists:

- One OpenMP thread. `faiss.omp_set_num_threads(1)` in the event loop's thread does not reach
  a worker thread: OpenMP gives each new thread its default, one per core. With two OpenMP
  threads and the proxy pinned to one core, a 4,096-vector search in the worker took 8 ms
  instead of 0.3 ms (measured here): the two spin-wait for each other on one core.
- Optionally the lowest CPU priority (`idle`: SCHED_IDLE, else nice 19; per thread on Linux),
  for background work such as rebuilding an index as HNSW, which the old index covers
  meanwhile: it then runs on cycles nothing else wants. Searches do not use it: a lookup
  waits for its search, and with the proxy's core 90% busy an idle-priority search thread
  waited for cycles (search p50 3 ms, p90 32 ms, measured here, against 0.2 ms).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

import faiss

from core.cpu_priority import become_idle_priority

T = TypeVar("T")


def _prepare_thread(idle: bool) -> None:
    faiss.omp_set_num_threads(1)
    if idle:
        become_idle_priority()


class FaissThread:
    """One thread; calls run one at a time, in the order they were made."""

    def __init__(self, name: str, idle: bool = False) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name, initializer=partial(_prepare_thread, idle)
        )
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, call: Callable[..., T], *args: object) -> asyncio.Future[T]:
        """`call(*args)` in the thread; the future completes on the running event loop."""
        return asyncio.get_running_loop().run_in_executor(self._executor, call, *args)

    async def close(self) -> None:
        """Wait for the calls already made, then end the thread."""
        if not self._closed:
            self._closed = True
            await asyncio.to_thread(self._executor.shutdown, wait=True)
