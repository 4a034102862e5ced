"""Checks of a /metrics scrape against Prometheus's conventions, shared by the proxy's and the
model server's tests: promtool (Debian's `prometheus` package) and what it does not check."""

from __future__ import annotations

import re
import shutil
import subprocess

from prometheus_client.parser import text_string_to_metric_families

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Every label name a Deja metric may carry; each takes its values from a small fixed set.
BOUNDED_LABELS = {
    "route", "cache", "status", "tier", "match", "kind", "reason", "guard", "window", "pool",
    "state", "le",
}  # fmt: skip
# Words that say a unit, and the base unit a name must use instead.
NOT_BASE_UNITS = re.compile(r"_(milliseconds|ms|microseconds|minutes|hours|kilobytes|kb|mb)\b")


def promtool_check(text: str) -> str:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed (make test installs it: ensure-system.sh)"
    done = subprocess.run(
        [binary, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def convention_problems(text: str) -> list[str]:
    problems = []
    for family in text_string_to_metric_families(text):
        name = family.name
        if not family.documentation or family.documentation.replace(" ", "_") == name:
            problems.append(f"{name}: no HELP text of its own")
        if family.type != "counter" and name.endswith("_total"):
            problems.append(f"{name}: a {family.type} named like a counter")
        if NOT_BASE_UNITS.search(name):
            problems.append(f"{name}: not in base units")
        for sample in family.samples:
            if family.type == "counter" and not sample.name.endswith(("_total", "_created")):
                problems.append(f"{sample.name}: a counter without _total")
            if set(sample.labels) - BOUNDED_LABELS:
                problems.append(f"{sample.name}: labels {sorted(sample.labels)}")
    return problems


def label_values(text: str, label: str) -> set[str]:
    return {
        sample.labels[label]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if label in sample.labels
    }
