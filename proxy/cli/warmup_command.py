"""`deja warmup FILE`: send known request/answer pairs (JSONL) to POST /admin/v1/warmup.

The proxy stores each line as it would store a live miss's answer (proxy/answering/warmup.py)
and answers each line as it goes; this command only streams the file up, draws the progress
(on stderr, when it is a terminal, or with --progress) and sums up: lines stored, lines refused
and why, grouped by reason. The exit status is 0 when every line was stored, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from proxy.cli.admin_client import AdminClient, AdminError, Target, WarmedLine, WarmUpTotals
from proxy.cli.client_flags import add_client_flags, target_from
from proxy.cli.output import count, print_json

CHUNK_BYTES = 64 * 1024
BAR_CELLS = 30
REDRAW_S = 0.1
LINES_PER_REASON = 5
READY_POLL_S = 0.5


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "warmup",
        help="store known answers (JSONL) before traffic asks for them",
        description='Each line: {"request": …, "response": …, "namespace"?, "api_key"? '
        'or "headers"?} (see the README\'s Admin API). FILE - reads stdin.',
    )
    parser.add_argument("file", metavar="FILE", help="a JSONL file, or - for stdin")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress", action="store_true", default=None, help="draw the progress bar"
    )
    progress.add_argument(
        "--no-progress", dest="progress", action="store_false", help="never draw it"
    )
    parser.add_argument("--json", action="store_true", help="the summary as JSON")
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for the proxy to be up and ready (/readyz) before sending",
    )
    add_client_flags(parser)
    parser.set_defaults(run=run)


def run(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    target = target_from(ns, environ)
    source, total = _open(ns.file)
    try:
        draw = sys.stderr.isatty() if ns.progress is None else ns.progress
        bar = ProgressBar(total, sys.stderr) if draw else None
        tally = asyncio.run(_warm_up(target, source, bar, ns.wait))
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    if ns.json:
        print_json(tally.as_json())
    else:
        print(tally.summary(ns.file))
    if tally.refused:
        raise AdminError(f"{tally.refused} of {tally.lines} lines were refused")
    return 0


@dataclass
class Tally:
    """What the proxy said of each line, summed up."""

    lines: int = 0
    stored: int = 0
    refused: int = 0
    # reason → the lines refused for it, in the order they came
    reasons: dict[str, list[int]] = field(default_factory=dict)

    def add(self, item: WarmedLine) -> None:
        if item.entry_id is not None:
            self.stored += 1
        else:
            self.refused += 1
            self.reasons.setdefault(item.error or "refused", []).append(item.line)

    def summary(self, name: str) -> str:
        head = (
            f"warm-up of {'stdin' if name == '-' else name}:"
            f" {count(self.lines)} line{'' if self.lines == 1 else 's'},"
            f" {count(self.stored)} stored, {count(self.refused)} refused"
        )
        rows = [head]
        for reason, lines in sorted(self.reasons.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(str(n) for n in lines[:LINES_PER_REASON])
            more = (
                f" and {len(lines) - LINES_PER_REASON} more"
                if len(lines) > LINES_PER_REASON
                else ""
            )
            label = "line" if len(lines) == 1 else "lines"
            rows.append(f"  {len(lines)} × {reason} ({label} {shown}{more})")
        return "\n".join(rows)

    def as_json(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "stored": self.stored,
            "refused": self.refused,
            "reasons": [
                {"reason": reason, "lines": lines} for reason, lines in self.reasons.items()
            ],
        }


class ProgressBar:
    """`[#######.......]  120/400 lines  stored 118  refused 2` on one redrawn line."""

    def __init__(self, total: int | None, out: TextIO) -> None:
        self._total = total
        self._out = out
        self._drawn_at = 0.0

    def update(self, tally: Tally, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._drawn_at < REDRAW_S:
            return
        self._drawn_at = now
        done = tally.stored + tally.refused
        if self._total:
            filled = min(BAR_CELLS, BAR_CELLS * done // self._total)
            bar = f"[{'#' * filled}{'.' * (BAR_CELLS - filled)}] {done}/{self._total} lines"
        else:
            bar = f"{done} lines"
        line = f"\rwarming up {bar}  stored {tally.stored}  refused {tally.refused}"
        self._out.write(line + ("\n" if final else ""))
        self._out.flush()


async def _warm_up(
    target: Target, source: BinaryIO, bar: ProgressBar | None, wait_s: float
) -> Tally:
    tally = Tally()
    async with AdminClient(target) as client:
        if wait_s > 0:
            await _until_ready(client, wait_s)
        async for item in client.warm_up(_chunks(source)):
            if isinstance(item, WarmUpTotals):
                # The proxy's own count of the lines it answered (blank lines are skipped).
                tally.lines = item.stored + item.refused
            else:
                tally.add(item)
                if bar is not None:
                    bar.update(tally)
    if bar is not None:
        bar.update(tally, final=True)
    return tally


async def _until_ready(client: AdminClient, wait_s: float) -> None:
    """A proxy just started loads its models before it takes a warm-up (503 until then); one
    not listening yet is waited for too."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if await client.ready():
                return
            why = "its models are still loading"
        except AdminError as exc:
            if exc.answered_status is not None:
                raise
            why = exc.message.split(";")[0]  # not listening (yet): the reason, not the hint
        if time.monotonic() >= deadline:
            raise AdminError(f"the proxy was not ready after {wait_s:g} s: {why}")
        await asyncio.sleep(READY_POLL_S)


async def _chunks(source: BinaryIO) -> AsyncIterator[bytes]:
    while chunk := await asyncio.to_thread(source.read, CHUNK_BYTES):
        yield chunk


def _open(name: str) -> tuple[BinaryIO, int | None]:
    """The file and how many lines the proxy will answer (blank ones it skips); stdin's
    count is not known in advance."""
    if name == "-":
        return sys.stdin.buffer, None
    path = Path(name)
    try:
        with path.open("rb") as f:
            total = sum(1 for line in f if line.strip())
        return path.open("rb"), total
    except OSError as exc:
        raise AdminError(f"cannot read {name}: {exc.strerror or exc}") from exc
