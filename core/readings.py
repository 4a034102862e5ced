"""One value a part reports at a scrape, typed: what it is, what it counts, its unit and labels.

The parts report readings (proxy/composition/report.py); the exporter (proxy/http/telemetry.py)
turns them into metric families. Everything a reading needs to follow Prometheus's conventions
is decided where it is read, next to the value: whether it only grows (a counter, exported with
`_total`), its HELP text, its unit (in the name: `_bytes`, `_seconds`, `_ratio`), its labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ReadingKind(StrEnum):
    GAUGE = "gauge"  # goes up and down
    COUNTER = "counter"  # only grows while the process lives; exported as `<name>_total`


@dataclass(frozen=True, slots=True)
class Reading:
    # Without the `deja_` prefix nor a counter's `_total`: "lru_k_evictions".
    name: str
    help: str
    value: float
    kind: ReadingKind = ReadingKind.GAUGE
    # Label values from a small fixed set (a worker's name, a window): never an id.
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        assert not self.name.endswith("_total"), f"{self.name}: the exporter adds _total"
        assert self.help and self.help != self.name, f"{self.name} needs a HELP text"


def gauge(name: str, help_text: str, value: float, **labels: str) -> Reading:
    return Reading(name, help_text, float(value), ReadingKind.GAUGE, tuple(sorted(labels.items())))


def counter(name: str, help_text: str, value: float, **labels: str) -> Reading:
    return Reading(
        name, help_text, float(value), ReadingKind.COUNTER, tuple(sorted(labels.items()))
    )
