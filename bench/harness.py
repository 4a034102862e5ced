"""Shared benchmark plumbing: cores and priorities for processes, wrk runs, steal, tables, JSON.

Benchmarks print a table and write JSON under bench/results/. Numbers are quoted as ratios to a
baseline measured in the same run, because this machine is shared and noisy. The processes they
start (the stub upstream, Redis, the proxy) are the tests' own: `tests.support`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from core.cpu_priority import NICENESS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PYTHON = sys.executable


def pinned(core: int | None, argv: Sequence[str]) -> list[str]:
    """argv run on one core, when taskset exists and the machine has that core."""
    if core is None or shutil.which("taskset") is None or core >= (os.cpu_count() or 1):
        return list(argv)
    return ["taskset", "-c", str(core), *argv]


def idle_priority(argv: Sequence[str]) -> list[str]:
    """argv run in the SCHED_IDLE class (only on CPU time nothing else wants) where chrt exists,
    else at the lowest nice (what core.cpu_priority.become_idle_priority does from inside a
    process). For load generators and stubs that share a core with the client
    whose latency is measured: under EEVDF a woken task may wait for a nice-19 neighbour to
    finish its slice (milliseconds), but a SCHED_IDLE one gives way at once."""
    if shutil.which("chrt") is not None:
        return ["chrt", "--idle", "0", *argv]
    return ["nice", "-n", str(NICENESS), *argv]


def post_json(
    url: str, payload: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, dict(response.headers), json.loads(response.read())


@dataclass(frozen=True)
class WrkResult:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    generator_cpu_share: float  # the load generator's CPU time / wall time (1.0 = one core busy)
    # CPU time (user + system) the server under test spent per request served, when its pid was
    # given: steadier than requests/s on a shared machine, since time stolen by other tenants
    # is not counted in it.
    server_cpu_us_per_request: float | None = None


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _latency_ms(text: str, percentile: str) -> float:
    match = re.search(rf"^\s*{percentile}%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.MULTILINE)
    if not match:
        raise RuntimeError(f"no {percentile}% latency in wrk output:\n{text}")
    return float(match.group(1)) * _UNITS_MS[match.group(2)]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a running process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) clock ticks of all CPUs so far (Linux /proc/stat; (0, 0) elsewhere).
    Steal is time the hypervisor gave this VM's CPUs to someone else: on a shared machine it
    comes in bursts of milliseconds, and a burst lands on a p99."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of CPU time stolen between two `cpu_ticks()` readings."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


T = TypeVar("T")


async def with_little_steal(
    measure: Callable[[], Awaitable[T]], max_steal: float, retries: int
) -> tuple[T, float, list[tuple[T, float]]]:
    """`measure()`, done again (up to `retries` times) while the hypervisor took more than
    `max_steal` of the CPUs during it: such a measurement times the neighbours, not the code.
    Returns the result kept, its steal share, and the (result, steal share) of those dropped."""
    dropped: list[tuple[T, float]] = []
    while True:
        ticks = cpu_ticks()
        result = await measure()
        share = steal_share(ticks, cpu_ticks())
        if share <= max_steal or len(dropped) == retries:
            return result, share, dropped
        dropped.append((result, share))


def run_wrk(
    url: str,
    script: Path,
    connections: int,
    duration_s: float,
    core: int | None,
    server_pid: int | None = None,
) -> WrkResult:
    argv = pinned(
        core,
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{duration_s:g}s",
            "--latency",
            "-s",
            str(script),
            url,
        ],
    )
    server_cpu_s = process_cpu_s(server_pid) if server_pid is not None else 0.0
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.monotonic() - started
    if server_pid is not None:
        server_cpu_s = process_cpu_s(server_pid) - server_cpu_s
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed:\n{output}")
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    errors = 0
    for pattern in (
        r"Non-2xx or 3xx responses: (\d+)",
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
    ):
        found = re.search(pattern, output)
        if found:
            errors += sum(int(g) for g in found.groups())
    assert rps and total, output
    requests = int(total.group(1))
    return WrkResult(
        requests_per_s=float(rps.group(1)),
        p50_ms=_latency_ms(output, "50"),
        p99_ms=_latency_ms(output, "99"),
        requests=requests,
        errors=errors,
        generator_cpu_share=(usage.ru_utime + usage.ru_stime) / wall_s,
        server_cpu_us_per_request=(
            server_cpu_s * 1e6 / requests if server_pid is not None and requests else None
        ),
    )


def wrk_post_script(
    body: bytes, headers: dict[str, str] | None = None, unique_prompt: bool = False
) -> Path:
    """A wrk Lua script posting `body`; with `unique_prompt`, every request asks something new
    (the literal __N__ in the body is replaced by a per-connection counter)."""
    lines = ['wrk.method = "POST"', 'wrk.headers["Content-Type"] = "application/json"']
    for name, value in (headers or {}).items():
        lines.append(f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}")
    template = json.dumps(body.decode())
    if unique_prompt:
        lines += [
            "local counter = 0",
            "local salt = tostring(math.random(1, 1000000000))",
            "request = function()",
            "  counter = counter + 1",
            f"  local b = string.gsub({template}, '__N__', salt .. '-' .. counter)",
            "  return wrk.format(nil, nil, nil, b)",
            "end",
        ]
    else:
        lines.append(f"wrk.body = {template}")
    path = Path(tempfile.mkstemp(prefix="deja-wrk-", suffix=".lua")[1])
    path.write_text("\n".join(lines) + "\n")
    return path


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    out = [
        f"\n{title}",
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    out += [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    text = "\n".join(out)
    print(text, flush=True)
    return text


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def write_json(name: str, data: Any) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=_jsonable))
    return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")
