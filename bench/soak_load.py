"""The steady mixed load of a soak, and the propagation probes that run beside it.

Each live proxy gets its own client thread at `rate` requests per second (paced, one request at
a time), each request drawn from the mix: a repeat of a question asked before (word for word),
a paraphrase of one (bench/data/everyday-en.jsonl's paraphrase pairs: the first of a pair is
asked first, the second later), or a new question (clinc150 prompts, each once), for one of two
tenants. Another thread, every `event_every_s`, through one proxy in turn:

- feedback eviction: a fresh question is stored, and once every live proxy serves it, two
  `irrelevant` signals evict it;
- invalidation: a fresh question in one of three namespaces is stored and, once every live proxy
  serves it, that namespace is invalidated;

then polls every live proxy at once, one poller each (`Cache-Control: no-store`: a lookup that
stores nothing) until it no longer serves the entry (a miss, or a hit on another entry), and
records how long that took on each (a probe not seen within `limit_s` is recorded as that limit
and fails the soak).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.soak_fleet import TOKEN, Fleet, Slot
from normalize.keys.request import PARTITION_TAG_CHARS
from tests.support.blocking_http import Reply, http
from tests.support.processes import ServerProcess

DATA = Path(__file__).resolve().parent / "data" / "everyday-en.jsonl"
NEW = Path(__file__).resolve().parents[2] / "shared" / "data" / "clinc150.dev.jsonl"
TENANTS = ("sk-soak-tenant-a", "sk-soak-tenant-b")
PROBE_TENANT = "sk-soak-probes"
NAMESPACES = ("inv-0", "inv-1", "inv-2")
MIX = (("repeat", 0.4), ("paraphrase", 0.25), ("new", 0.35))


@dataclass(frozen=True)
class Sample:
    at_s: float  # since the soak started, when the request was sent
    slot: int
    kind: str
    status: int
    cache: str
    latency_s: float


@dataclass(frozen=True)
class Probe:
    at_s: float
    kind: str  # "feedback" or "invalidate"
    via: int
    seen_s: dict[int, float]  # slot -> seconds until it no longer served the entry
    error: str = ""


def ask(
    server: ServerProcess, question: str, key: str, headers: dict[str, str] | None = None
) -> Reply:
    body = {"model": "m", "messages": [{"role": "user", "content": question}]}
    return http(
        server,
        "POST",
        "/v1/chat/completions",
        body,
        {"Authorization": f"Bearer {key}", **(headers or {})},
    )


def admin(server: ServerProcess, method: str, path: str, payload: object = None) -> Reply:
    return http(server, method, f"/admin/v1/{path}", payload, {"Authorization": f"Bearer {TOKEN}"})


class Questions:
    """What the clients ask: thread-safe draws from the mix."""

    def __init__(self, seed: int) -> None:
        pairs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
        self._pairs = [(p["a"], p["b"]) for p in pairs if p.get("kind") == "paraphrase"]
        self._new = [json.loads(line)["prompt"] for line in NEW.read_text().splitlines()]
        self._random = random.Random(seed)
        self._random.shuffle(self._new)
        self._asked: list[tuple[str, str]] = []  # (tenant, question)
        self._firsts: list[tuple[str, int]] = []  # (tenant, pair index) whose first was asked
        self._lock = threading.Lock()
        self._next_new = 0

    def draw(self) -> tuple[str, str, str]:
        """(kind, tenant key, question)."""
        with self._lock:
            r, kind = self._random.random(), "new"
            for name, share in MIX:
                if r < share:
                    kind = name
                    break
                r -= share
            if kind == "repeat" and self._asked:
                tenant, question = self._random.choice(self._asked)
                return kind, tenant, question
            if kind == "paraphrase" and self._firsts:
                tenant, i = self._random.choice(self._firsts)
                return kind, tenant, self._pairs[i][1]
            tenant = self._random.choice(TENANTS)
            if self._random.random() < 0.5 and len(self._firsts) < len(self._pairs) * 2:
                i = self._random.randrange(len(self._pairs))
                self._firsts.append((tenant, i))
                question = self._pairs[i][0]
            else:
                question = self._new[self._next_new % len(self._new)]
                self._next_new += 1
            self._asked.append((tenant, question))
            return "new", tenant, question


@dataclass
class Load:
    fleet: Fleet
    started: float
    rate: float
    questions: Questions
    samples: list[Sample] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    # Held by a probe while it runs, and by a restart: neither starts during the other.
    probing: threading.Lock = field(default_factory=threading.Lock)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.started

    def client(self, slot: Slot) -> None:
        """Paced requests to one slot until stopped (skipping it while it is down)."""
        period, next_at = 1.0 / self.rate, time.monotonic()
        while not self.stop.is_set():
            next_at += period
            self.stop.wait(max(0.0, next_at - time.monotonic()))
            if self.stop.is_set():
                return
            if slot.down:
                next_at = time.monotonic()
                continue
            kind, key, question = self.questions.draw()
            sent = self.now()
            server = slot.server
            try:
                reply = ask(server, question, key)
                status, cache = reply.status, reply.headers.get("X-Deja-Cache", "")
                entry = reply.headers.get("X-Deja-Entry", "")
            except OSError as error:
                status, cache, entry = 0, "", ""
                self._fail(f"slot {slot.index}: {kind} request failed: {error!r}")
            if status != 200 and status != 0:
                self._fail(f"slot {slot.index}: {kind} answered {status}: {reply.raw[:200]!r}")
            if entry and server is slot.server:
                slot.tags.add(entry[:PARTITION_TAG_CHARS])
            with self._lock:
                self.samples.append(
                    Sample(sent, slot.index, kind, status, cache, self.now() - sent)
                )

    def prober(self, every_s: float, limit_s: float) -> None:
        n = 0
        while not self.stop.wait(every_s):
            with self.probing:
                live = self.fleet.live()
                if len(live) < len(self.fleet.slots):
                    continue
                via = live[n % len(live)]
                kind = "feedback" if n % 2 == 0 else "invalidate"
                try:
                    self.probes.append(self._probe(kind, n, via, live, limit_s))
                except (AssertionError, OSError) as error:
                    self.probes.append(Probe(self.now(), kind, via.index, {}, repr(error)))
                    self._fail(f"probe {n} ({kind} via {via.index}): {error!r}")
                n += 1

    def _probe(self, kind: str, n: int, via: Slot, live: list[Slot], limit_s: float) -> Probe:
        namespace = NAMESPACES[n % len(NAMESPACES)]
        headers = {"X-Deja-Namespace": namespace} if kind == "invalidate" else {}
        question = f"Soak probe {n}: which {kind} came through replica {via.index}?"
        stored = ask(via.server, question, PROBE_TENANT, headers)
        assert stored.status == 200, (stored.status, stored.raw[:200])
        entry = stored.headers["X-Deja-Entry"]
        lookup = {**headers, "Cache-Control": "no-store"}

        def serves(slot: Slot) -> Callable[[], bool]:
            def check() -> bool:
                reply = ask(slot.server, question, PROBE_TENANT, lookup)
                assert reply.status == 200, (reply.status, reply.raw[:200])
                return reply.headers.get("X-Deja-Entry") == entry and (
                    reply.headers.get("X-Deja-Cache") == "hit"
                )

            return check

        # Every live replica serves it first (its partition loaded, the entry replicated).
        for slot in live:
            _until(serves(slot), 30.0)
        if kind == "feedback":
            for _ in range(2):
                reply = admin(
                    via.server, "POST", "feedback", {"entry_id": entry, "signal": "irrelevant"}
                )
                assert reply.status == 200, (reply.status, reply.raw[:200])
        else:
            reply = admin(
                via.server,
                "POST",
                "invalidate",
                {"tenant_key": PROBE_TENANT, "namespace": namespace},
            )
            assert reply.status == 200, (reply.status, reply.raw[:200])
        done, at = time.monotonic(), self.now()
        seen: dict[int, float] = {}

        def watch(slot: Slot) -> None:
            # One poller per proxy, all at once: polled one after the other, each proxy's time
            # would include the lookups of those polled before it.
            try:
                while serves(slot)():
                    if time.monotonic() - done > limit_s:
                        seen[slot.index] = float("inf")
                        return
                    time.sleep(0.02)
            except (AssertionError, OSError) as error:
                seen[slot.index] = float("inf")
                self._fail(f"probe {n} ({kind}): polling proxy {slot.index}: {error!r}")
                return
            seen[slot.index] = time.monotonic() - done

        watchers = [threading.Thread(target=watch, args=(slot,)) for slot in live]
        for watcher in watchers:
            watcher.start()
        for watcher in watchers:
            watcher.join()
        return Probe(at, kind, via.index, seen)

    def _fail(self, message: str) -> None:
        with self._lock:
            self.failures.append(f"{self.now():.1f}s {message}")


def _until(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not reached within {timeout_s} s"
        time.sleep(0.05)
