"""A scripted upstream outage at a steady request rate through the proxy.

Processes: Redis, the stub upstream (tests/support/stub_process.py, 50 ms to answer), and
`deja serve` in front of them, on core 0; the client on core 1. The client is open-loop: it
starts RATE requests a second on schedule, whatever the earlier ones are doing, from a mix of
70% recurring questions (a pool of 40) and 30% questions never asked before, half of them
streamed. The script: BEFORE seconds of normal service; the upstream is killed (SIGKILL) for
OUTAGE seconds; it is restarted and the run goes on for AFTER seconds.

The proxy's config is shortened so a short run shows every state: entries live 5 s (stale
for an hour after that), the breaker opens at half of its last 20 calls (10 at least) and
cools down for 3 s; no retries. With --fallback, a prompt-level fallback answer is configured.

Reported per phase (by when a request started): the shares answered fresh (a miss the upstream
answered), cached (a hit), degraded (stale / neighbour / fallback) and error; and the recovery
time: from the upstream's restart to the first fresh answer, which includes the breaker's
cool-down (and to the breaker closing, from /readyz).

    python -m bench.faults [--rate 40] [--before-s 10] [--outage-s 10] [--after-s 15] [--fallback]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.harness import PYTHON, pinned, print_table, write_json
from tests.support.processes import ServerProcess
from tests.support.redis_server import RedisServer, free_port
from tests.support.stub_process import StubProcess

SERVER_CORE, CLIENT_CORE = 0, 1
COOLDOWN_S = 3.0
TTL_S = 5.0
RECURRING = [f"What is the capital of country number {i}?" for i in range(40)]
FALLBACK = "The model is unavailable right now; please try again in a minute."
PHASES = ("before", "during", "after")
OUTCOMES = ("fresh", "cached", "degraded", "error")


@dataclass(frozen=True)
class Outcome:
    started_s: float  # since the run began
    ended_s: float
    kind: str  # one of OUTCOMES
    detail: str  # hit / miss / stale / fallback / the error status


def proxy_env(fallback: bool) -> dict[str, str]:
    env = {
        "DEJA_SEMANTIC__ENABLED": "false",
        "DEJA_CACHE__TENANT_SECRET": "bench",
        "DEJA_SERVER__ACCESS_LOG": "false",
        "DEJA_UPSTREAM__REQUEST_LOGPROBS": "false",
        "DEJA_UPSTREAM__MAX_RETRIES": "0",
        "DEJA_UPSTREAM__CONNECT_TIMEOUT_S": "1",
        "DEJA_UPSTREAM__FIRST_BYTE_TIMEOUT_S": "5",
        "DEJA_TTL__BASE_TTL_S": str(TTL_S),
        "DEJA_BREAKER__COOLDOWN_S": str(COOLDOWN_S),
    }
    if fallback:
        env["DEJA_DEGRADE__FALLBACK_TEMPLATE"] = FALLBACK
    return env


async def one_request(
    session: aiohttp.ClientSession, url: str, question: str, stream: bool, t0: float
) -> Outcome:
    started = time.monotonic() - t0
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": question}]}
    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=10)) as r:
            raw = await r.read()
            cache = r.headers.get("X-Deja-Cache", "")
            degraded = r.headers.get("X-Deja-Degraded", "")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Outcome(started, time.monotonic() - t0, "error", type(exc).__name__)
    ended = time.monotonic() - t0
    if r.status != 200:
        return Outcome(started, ended, "error", str(r.status))
    if stream and not raw.rstrip().endswith(b"data: [DONE]"):
        return Outcome(started, ended, "error", "broken stream")
    if cache == "degraded":
        return Outcome(started, ended, "degraded", degraded)
    return Outcome(started, ended, "cached" if cache == "hit" else "fresh", cache)


async def drive(args: argparse.Namespace, proxy_url: str, upstream: StubProcess) -> dict[str, Any]:
    rng = random.Random(7)
    url = proxy_url + "/v1/chat/completions"
    total_s = args.before_s + args.outage_s + args.after_s
    tasks: list[asyncio.Task[Outcome]] = []
    breaker_log: list[tuple[float, str]] = []
    events: dict[str, float] = {}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.monotonic()

        async def watch_breaker() -> None:
            while True:
                async with session.get(proxy_url + "/readyz") as r:
                    state = (await r.json())["breaker"]["state"]
                if not breaker_log or breaker_log[-1][1] != state:
                    breaker_log.append((time.monotonic() - t0, state))
                await asyncio.sleep(0.1)

        async def script() -> None:
            await asyncio.sleep(args.before_s)
            upstream.kill()
            events["killed_s"] = time.monotonic() - t0
            await asyncio.sleep(args.outage_s)
            await asyncio.to_thread(upstream.start)
            events["restarted_s"] = time.monotonic() - t0

        watcher = asyncio.create_task(watch_breaker())
        scripted = asyncio.create_task(script())
        for n in range(int(total_s * args.rate)):
            await asyncio.sleep(max(0.0, t0 + n / args.rate - time.monotonic()))
            if rng.random() < 0.7:
                question = rng.choice(RECURRING)
            else:
                question = f"A question never asked before, number {n}?"
            tasks.append(asyncio.create_task(one_request(session, url, question, n % 2 == 1, t0)))
        outcomes = await asyncio.gather(*tasks)
        await scripted
        watcher.cancel()
    return {"outcomes": outcomes, "events": events, "breaker": breaker_log}


def phase_of(outcome: Outcome, events: dict[str, float]) -> str:
    if outcome.started_s < events["killed_s"]:
        return "before"
    return "during" if outcome.started_s < events["restarted_s"] else "after"


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    outcomes: list[Outcome] = run["outcomes"]
    events = run["events"]
    phases: dict[str, Any] = {}
    for phase in PHASES:
        mine = [o for o in outcomes if phase_of(o, events) == phase]
        kinds = Counter(o.kind for o in mine)
        phases[phase] = {
            "requests": len(mine),
            **{kind: kinds[kind] / len(mine) for kind in OUTCOMES},
            "details": dict(Counter(f"{o.kind}:{o.detail}" for o in mine)),
        }
    restarted = events["restarted_s"]
    fresh_after = [o.ended_s for o in outcomes if o.kind == "fresh" and o.started_s >= restarted]
    closed_after = [t for t, state in run["breaker"] if state == "closed" and t >= restarted]
    return {
        "phases": phases,
        "recovery_s": (min(fresh_after) - restarted) if fresh_after else None,
        "breaker_closed_s": (closed_after[0] - restarted) if closed_after else None,
        "events": events,
        "breaker_transitions": run["breaker"],
    }


def report(summary: dict[str, Any], args: argparse.Namespace) -> str:
    rows = []
    for phase in PHASES:
        p = summary["phases"][phase]
        rows.append([phase, p["requests"], *(f"{p[k]:.1%}" for k in OUTCOMES)])
    title = (
        f"Upstream outage at {args.rate:g} req/s: {args.before_s:g} s up, {args.outage_s:g} s"
        f" killed, {args.after_s:g} s after restart (breaker cool-down {COOLDOWN_S:g} s"
        f"{', fallback template on' if args.fallback else ''})"
    )
    table = print_table(title, ["phase", "requests", *OUTCOMES], rows)
    lines = [
        f"recovery: first fresh answer {summary['recovery_s']:.2f} s after the upstream restart;"
        f" breaker closed after {summary['breaker_closed_s']:.2f} s",
    ]
    for phase in PHASES:
        lines.append(f"{phase}: {summary['phases'][phase]['details']}")
    text = "\n".join(lines)
    print(text)
    return table + "\n" + text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=40.0, help="requests per second")
    parser.add_argument("--before-s", type=float, default=10.0)
    parser.add_argument("--outage-s", type=float, default=10.0)
    parser.add_argument("--after-s", type=float, default=15.0)
    parser.add_argument("--fallback", action="store_true", help="configure a fallback template")
    args = parser.parse_args()
    if (os.cpu_count() or 1) > CLIENT_CORE:
        os.sched_setaffinity(0, {CLIENT_CORE})

    proxy_port = free_port()
    redis = RedisServer(prefix=pinned(SERVER_CORE, []))
    # The stub answers in 50 ms; killed and started again on its port for the outage.
    upstream = StubProcess(command_prefix=pinned(SERVER_CORE, []), delay_s=0.05)
    proxy: ServerProcess | None = None
    try:
        redis.start()
        upstream.start()
        argv = [PYTHON, "-m", "proxy.cli", "serve", "--port", str(proxy_port), "--upstream",
                upstream.base_url, "--redis", redis.url]  # fmt: skip
        proxy = ServerProcess(
            "proxy", pinned(SERVER_CORE, argv), proxy_port, env=proxy_env(args.fallback)
        )
        proxy.wait_ready("/readyz", timeout_s=120)
        run = asyncio.run(drive(args, proxy.url, upstream))
    finally:
        upstream.stop()
        if proxy is not None:
            proxy.stop()
        redis.close()
    summary = summarize(run)
    text = report(summary, args)
    name = "faults_fallback" if args.fallback else "faults"
    path = write_json(name, {"config": vars(args), "cooldown_s": COOLDOWN_S, "ttl_s": TTL_S,
                             **summary, "table": text})  # fmt: skip
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
