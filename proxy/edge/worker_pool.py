"""Where a front sends what it relays when its workers are shared: every address of every
worker URL in turn, skipping for a while those that could not be reached.

    edge.worker_urls: [tcp://deja-worker:8090]      one name, resolved every resolve_interval_s
        deja-worker -> 10.0.3.7, 10.0.5.2, 10.0.9.4  (a headless Service: one address per pod)
    request 1 -> 10.0.3.7, request 2 -> 10.0.5.2, ...   (round robin over those not skipped)

A Kubernetes ClusterIP Service would balance connections, not requests: a front keeps its
connections open, so one front would talk to one pod for minutes. Resolving the pods' own
addresses and choosing per request spreads every front's load over every worker.

An address that refused, timed out or dropped a connection is skipped for `retry_min_s`,
doubling while it keeps failing, up to `retry_max_s` (`RetryWindow`); the first request after
the window tries it again, and the front's report (every 200 ms) is such a request, so a
restarted worker is found again within the window without any request waiting on it. While
every address is skipped, `targets()` is empty and the front answers without a worker at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from core.clock import Clock
from core.config import EdgeConfig
from core.config_checks import worker_address

_log = logging.getLogger("deja.edge")

# (host, port) -> the IP addresses it stands for now.
Resolve = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class WorkerTarget:
    """One worker address: `name` as configured (TLS checks the certificate against it),
    `address` the IP connected to."""

    name: str
    address: str
    port: int

    def base_url(self, scheme: str) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{scheme}://{host}:{self.port}"

    def __str__(self) -> str:
        shown = self.address if self.address == self.name else f"{self.name} ({self.address})"
        return f"{shown}:{self.port}"


class RetryWindow:
    """How long an address that failed is skipped: `min_s`, doubling per failure in a row, at
    most `max_s`; a success forgets the failures."""

    def __init__(self, min_s: float, max_s: float, clock: Clock) -> None:
        self._min_s = min_s
        self._max_s = max_s
        self._clock = clock
        self._failures = 0
        self._until = 0.0

    def open(self) -> bool:
        return self._clock.monotonic() >= self._until

    @property
    def failures(self) -> int:
        return self._failures

    def failed(self) -> float:
        """Skip it from now; returns for how long."""
        wait_s = min(self._max_s, self._min_s * 2**self._failures)
        self._failures += 1
        self._until = self._clock.monotonic() + wait_s
        return wait_s

    def succeeded(self) -> None:
        self._failures = 0
        self._until = 0.0


async def resolve_addresses(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, in the resolver's order, each once."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class WorkerPool:
    def __init__(
        self, config: EdgeConfig, clock: Clock, resolve: Resolve = resolve_addresses
    ) -> None:
        self._config = config
        self._clock = clock
        self._resolve = resolve
        self._names: list[tuple[str, int]] = []
        for url in config.worker_urls:
            found = worker_address(url)
            assert not isinstance(found, str), f"edge.worker_urls is validated: {found}"
            self._names.append(found)
        self._targets: list[WorkerTarget] = []
        self._windows: dict[WorkerTarget, RetryWindow] = {}
        self._next = 0

    @property
    def known(self) -> Sequence[WorkerTarget]:
        return tuple(self._targets)

    def targets(self) -> list[WorkerTarget]:
        """The addresses to try for one request, in order: each not skipped, starting one
        further along than the previous request did."""
        found = self._targets
        if not found:
            return []
        start = self._next % len(found)
        self._next = start + 1
        rotated = found[start:] + found[:start]
        return [t for t in rotated if self._windows[t].open()]

    def failed(self, target: WorkerTarget, why: str) -> None:
        window = self._windows.get(target)
        if window is None:
            return  # resolved away meanwhile
        first = window.failures == 0
        wait_s = window.failed()
        log = _log.warning if first else _log.debug
        log("worker %s unreachable (%s); skipped for %.1f s", target, why, wait_s)

    def succeeded(self, target: WorkerTarget) -> None:
        window = self._windows.get(target)
        if window is not None and window.failures:
            _log.info("worker %s answers again", target)
            window.succeeded()

    async def refresh(self) -> None:
        """Resolve every name again; an address kept keeps its retry window. A name that does
        not resolve keeps its previous addresses (a DNS hiccup is not every pod gone)."""
        targets: list[WorkerTarget] = []
        for name, port in self._names:
            try:
                addresses = await self._resolve(name, port)
            except OSError as exc:
                _log.warning("cannot resolve worker %s:%d: %s", name, port, exc)
                targets += [t for t in self._targets if (t.name, t.port) == (name, port)]
                continue
            targets += [WorkerTarget(name, address, port) for address in addresses]
        targets = list(dict.fromkeys(targets))
        if targets != self._targets:
            _log.info("workers: %s", ", ".join(map(str, targets)) or "none")
        c = self._config
        self._windows = {
            t: self._windows.get(t) or RetryWindow(c.retry_min_s, c.retry_max_s, self._clock)
            for t in targets
        }
        self._targets = targets

    async def run(self) -> None:
        """Resolve again every `resolve_interval_s` until cancelled."""
        while True:
            await asyncio.sleep(self._config.resolve_interval_s)
            await self.refresh()
