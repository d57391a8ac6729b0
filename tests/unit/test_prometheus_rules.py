"""The shipped Prometheus rules: promtool checks them and runs their unit tests, and every
alert has a test that fires it and one that does not, so that a new alert without tests
fails here. The metrics the rules read are the ones slurm-ml exports or the node
textfile carries (the names are pinned below), so that a renamed metric cannot leave a
rule silently asking for nothing."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG, asset_path
from slurm_ml.config import load_config
from slurm_ml.daemon.metrics import Metrics
from slurm_ml.submitd.server import PolicyServer
from slurm_ml.submitd.state import StateRefresher

RULES = asset_path("conf", "prometheus", "slurm-ml.rules.yml")
TESTS = asset_path("conf", "prometheus", "slurm-ml.rules.test.yml")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus; "
                             "`slurm-ml devcluster up` installs it)")
#: What the periodic health check writes for node_exporter's textfile collector, per
#: Slurm node (label ``node``).
TEXTFILE_METRICS = {
    "slurm_ml_node_health_pass", "slurm_ml_node_health_last_check_timestamp_seconds",
    "slurm_ml_node_health_findings", "slurm_ml_node_drained", "slurm_ml_node_drained_by_slurm_ml",
    "slurm_ml_gpu_xid_errors", "slurm_ml_gpu_nvlink_links_active",
    "slurm_ml_node_gpus_allocated", "slurm_ml_node_gpus_allocated_idle",
    "slurm_ml_node_spool_records",
}


def _yaml(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def _rules() -> list[dict[str, Any]]:
    return [r for g in _yaml(RULES)["groups"] for r in g["rules"]]


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in _rules() if "alert" in r}


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    assert PROMTOOL is not None
    res = proc.run([PROMTOOL, "check", "rules", str(RULES)], check=False, timeout_s=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in res.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    assert PROMTOOL is not None
    res = proc.run([PROMTOOL, "test", "rules", TESTS.name], check=False, timeout_s=120,
                   cwd=str(TESTS.parent))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_the_tests_load_the_shipped_rules_unchanged() -> None:
    assert _yaml(TESTS)["rule_files"] == [RULES.name]


def test_every_alert_has_a_test_that_fires_it_and_one_that_does_not() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in _yaml(TESTS)["tests"]:
        for t in case.get("alert_rule_test", []):
            (fired if t.get("exp_alerts") else quiet).add(t["alertname"])
    alerts = set(_alerts())
    assert alerts - fired == set(), "alerts no test fires"
    assert alerts - quiet == set(), "alerts no test sees quiet"
    assert (fired | quiet) - alerts == set(), "tests of alerts the rules do not have"


def test_every_recording_rule_has_its_value_tested() -> None:
    recorded = {r["record"] for r in _rules() if "record" in r}
    asked = {t["expr"] for case in _yaml(TESTS)["tests"]
             for t in case.get("promql_expr_test", [])}
    assert recorded - asked == set()


@pytest.mark.parametrize("name", sorted(_alerts()))
def test_each_alert_says_how_bad_what_is_true_and_where_to_read_on(name: str) -> None:
    rule = _alerts()[name]
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    notes = rule["annotations"]
    assert set(notes) == {"summary", "description", "runbook"}
    assert notes["runbook"] == f"docs/operator.md#{name.lower()}"
    assert len(notes["description"]) > 100, "what is true, and what to do"


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings in ``markdown``."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        out.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return out


def test_each_runbook_is_a_section_of_the_operators_runbook() -> None:
    operator = Path(__file__).resolve().parents[2] / "docs" / "operator.md"
    anchors = _anchors(operator.read_text())
    missing = [r["annotations"]["runbook"] for r in _alerts().values()
               if r["annotations"]["runbook"].partition("#")[2] not in anchors]
    assert missing == []
    assert "alerts" in anchors


def _names(expr: str) -> set[str]:
    """The metric names ``expr`` reads (words that start with slurm_ml_, and up; not the
    recording rules' names, level:metric:operations)."""
    return set(re.findall(r"(?<![:\w])(slurm_ml_[a-z_]+|up)\b(?!:)", expr))


def test_the_rules_read_metrics_that_exist() -> None:
    cfg = load_config(DEFAULT_CONFIG)
    exported = generate_latest(Metrics().registry).decode()
    exported += generate_latest(
        PolicyServer(cfg, StateRefresher(None, cfg)).metrics.registry).decode()
    families = set(re.findall(r"^# TYPE (\S+) ", exported, re.MULTILINE))
    known = families | {f + "_total" for f in families} | TEXTFILE_METRICS | {"up"}
    read = set().union(*(_names(r["expr"]) for r in _rules()))
    assert read - known == set()
