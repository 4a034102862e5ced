"""The header and status-code contract is written twice, for users (README, "Headers and status
codes") and for the design (docs/architecture.md, "The header and status-code contract"): the
two copies stay the same, and every X-Deja-* header the proxy sets or reads is in them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Front ↔ worker relay headers of shared workers: internal to a fleet, documented apart.
INTERNAL = {"X-Deja-Edge-Secret", "X-Deja-Edge-Refused"}


def tables(text: str, heading: str) -> list[list[str]]:
    """The Markdown tables of the section under `heading` (up to the next `## `)."""
    section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    found: list[list[str]] = []
    current: list[str] = []
    for line in section.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    return found


def readme_tables() -> list[list[str]]:
    return tables((ROOT / "README.md").read_text(), "## Headers and status codes")


def architecture_tables() -> list[list[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return tables(text, "## The header and status-code contract")


def test_the_two_copies_of_the_contract_are_the_same() -> None:
    readme, architecture = readme_tables(), architecture_tables()
    assert len(readme) == 2, "the README's section has a header table and a status table"
    assert readme == architecture


def test_every_header_the_proxy_names_is_in_the_contract() -> None:
    documented = {
        match
        for line in readme_tables()[0]
        for match in re.findall(r"`(X-Deja-[A-Za-z-]+)`", line.split("|")[1])
    }
    named: set[str] = set()
    for folder in ("proxy", "core", "tiers", "fallback", "normalize"):
        for path in (ROOT / folder).rglob("*.py"):
            named |= set(re.findall(r"\"(X-Deja-[A-Za-z-]+)\"", path.read_text()))
    assert named - INTERNAL - documented == set()
    assert named >= {"X-Deja-Cache", "X-Deja-Explain"}  # the search itself works


def test_every_status_row_names_a_status_and_an_error_type() -> None:
    rows = readme_tables()[1][2:]
    assert rows, "the status table has rows"
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert re.fullmatch(r"[1-5]\d\d", cells[0]), row
        assert re.fullmatch(r"`[a-z_]+`", cells[1]), row
