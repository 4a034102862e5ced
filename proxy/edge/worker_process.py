"""Edge mode's worker as an operating-system process: started by the front, watched both ways.

The front starts `deja serve` again with `--worker-socket PATH` and the same flags and
environment, so the worker reads the same configuration. The worker lowers its own priority
(`server.edge_worker_idle`: SCHED_IDLE, so a hit arriving at the front preempts it at once; at
nice 5 instead, measured, hits waited out its time slices and their p99 under semantic load was
eight times the quiet one) and keeps the front's cores.

Each watches the other: the front stops when its worker exits (the supervisor restarts the
pair; a front relaying to nothing would only answer 503), and the worker stops when its front
is gone (it would otherwise hold the models' memory with nobody to serve).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from core.cpu_priority import become_idle_priority

_log = logging.getLogger("deja.edge")
_POLL_S = 0.5


class WorkerProcess:
    def __init__(self, serve_args: Sequence[str], socket_path: str) -> None:
        self._argv = [
            sys.executable,
            "-m",
            "proxy.cli",
            *serve_args,
            "--worker-socket",
            socket_path,
        ]
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = False
        # Set when the worker exited without being asked to: `deja serve` then exits non-zero.
        self.failed = False

    def start(self) -> None:
        self._process = subprocess.Popen(self._argv)
        _log.info("worker process %d started", self._process.pid)

    async def watch(self) -> None:
        """Return once the worker has exited; if it was not asked to, stop this process too."""
        process = self._process
        assert process is not None
        # Polled: a thread blocked in wait() would outlive a cancelled watch.
        while True:
            await asyncio.sleep(_POLL_S)
            if process.poll() is not None:
                break
        if not self._stopping:
            self.failed = True
            _log.error(
                "worker process exited with status %s; stopping the front", process.returncode
            )
            os.kill(os.getpid(), signal.SIGTERM)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM (the worker drains its requests for up to `grace_s`), then SIGKILL."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        self._stopping = True
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, grace_s + 5.0)
        except subprocess.TimeoutExpired:
            _log.error("worker process %d did not stop in time; killing it", process.pid)
            process.kill()
            await asyncio.to_thread(process.wait)


def settle_as_worker(idle: bool) -> None:
    """In the worker: the idle priority class when configured. It keeps the cores the front
    was given: widened to every core (as the model workers are), it ran beside the benchmark's
    client on the other core, and the client's own timings suffered (this kernel does not
    preempt a task inside a system call, whatever its class)."""
    if idle:
        become_idle_priority()


async def exit_with_parent(parent_pid: int) -> None:
    """In the worker: SIGTERM this process once its front (`parent_pid`) is gone."""
    while True:
        await asyncio.sleep(_POLL_S)
        if os.getppid() != parent_pid:
            break
    _log.error("the front process %d is gone; stopping the worker", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)
