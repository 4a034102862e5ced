"""How the commands print: aligned tables, short durations, JSON, and asking for consent."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def print_json(payload: Any, out: TextIO | None = None) -> None:
    print(json.dumps(payload, indent=2, ensure_ascii=False), file=out or sys.stdout)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is left ragged."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def pairs(rows: Sequence[tuple[str, str]]) -> str:
    """`label   value` lines, the values aligned."""
    width = max((len(label) for label, _ in rows), default=0)
    return "\n".join(f"{label.ljust(width)}  {value}".rstrip() for label, value in rows)


def duration(seconds: float) -> str:
    """3s, 4m 05s, 2h 10m, 3d 4h: the two largest units."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def count(n: int) -> str:
    return f"{n:,}"


def percent(rate: float) -> str:
    return f"{rate * 100:.1f}%"


def size(n_bytes: int) -> str:
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable: GiB ends the loop")


def masked(secret: str) -> str:
    """A key as a prompt may show it: its start and its last four characters."""
    if len(secret) <= 8:
        return "…" * bool(secret)
    return f"{secret[:3]}…{secret[-4:]}"


def confirmed(question: str, stdin: TextIO, stderr: TextIO) -> bool:
    """Asks on stderr; only "y" or "yes" is consent, and no answer at all (end of input)
    is a refusal."""
    print(f"{question} [y/N] ", end="", file=stderr, flush=True)
    answer = stdin.readline()
    if not answer.endswith("\n") or not stdin.isatty():
        print(file=stderr)  # no echo of a piped answer, or none at all: finish the line
    return answer.strip().lower() in ("y", "yes")
