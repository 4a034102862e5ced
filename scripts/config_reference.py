"""Prints the configuration reference (markdown) from config/deja.yaml's keys and comments.

python scripts/config_reference.py > /tmp/ref.md    (the README's "Configuration" table)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "config" / "deja.yaml"


def reference(text: str) -> str:
    rows = ["| key | default | meaning |", "|---|---|---|"]
    section = ""
    for line in text.splitlines():
        if re.match(r"^[a-z_]+:\s*$", line):
            section = line.rstrip(":").strip()
            continue
        match = re.match(r"^  ([a-z_0-9]+):\s*(.*?)\s*(?:#\s*(.*))?$", line)
        if match and section:
            key, default, comment = match.groups()
            default = default if default not in ("", None) else "(a list: see config/deja.yaml)"
            rows.append(f"| `{section}.{key}` | `{default}` | {comment or ''} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(reference(SHIPPED.read_text()) + "\n")
