"""deploy/prometheus-rules.yml: valid for `promtool check rules`, and each alert fires on the
signal it is about and not on its look-alike (`promtool test rules` over
tests/deploy/alert_rules_test.yml). promtool is Debian's `prometheus` package
(scripts/ensure-system.sh installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus-rules.yml"
RULE_TESTS = Path(__file__).resolve().parent / "alert_rules_test.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus.yml"


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed (make test installs it: ensure-system.sh)"
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_are_valid() -> None:
    done = promtool("check", "rules", str(RULES), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_fires_on_its_signal_and_not_on_its_look_alike() -> None:
    done = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_tested() -> None:
    alerts = {
        rule["alert"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert (
        alerts
        == tested
        == {
            "DejaFastHitsDropped",
            "DejaEntryCompressionDropped",
            "DejaMissStorm",
            "DejaFalseHitsAboveTarget",
        }
    )


def test_the_rule_tests_catch_a_miss_storm_rule_that_reacts_too_late(tmp_path: Path) -> None:
    # The same rules with the miss storm's `for:` at 30 minutes: the storm of the test lasts
    # 30, so the alert would never fire, and the rule tests must say so.
    slow = RULES.read_text().replace("        for: 5m\n", "        for: 30m\n")
    assert slow != RULES.read_text()
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "prometheus-rules.yml").write_text(slow)
    (tmp_path / "tests" / "deploy").mkdir(parents=True)
    (tmp_path / "tests" / "deploy" / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    done = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path / "tests" / "deploy")
    assert done.returncode != 0 and "DejaMissStorm" in done.stdout + done.stderr


def test_prometheus_loads_the_rules(tmp_path: Path) -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = dict(v.split(":")[:2] for v in compose["services"]["prometheus"]["volumes"])
    assert config["rule_files"] == [mounts["./deploy/prometheus-rules.yml"]]
    # The config as the container sees it: the rules at the path it names.
    config["rule_files"] = [str(RULES)]
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config))
    done = promtool("check", "config", str(local), cwd=tmp_path)
    assert done.returncode == 0 and "4 rules found" in done.stdout, done.stdout + done.stderr
