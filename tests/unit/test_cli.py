"""The operator CLI: exit codes and messages people rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(DEFAULT_CONFIG)

BAD = """
cluster: {name: x, partitions: [{name: gpu, nodes: "gpu[01-02]", default: true, max_time_min: 60}]}
gpu_types:
  a100: {memory_gb: -1, nvlink_links: 12, compute_capability: "8.0", billing_weight: 1,
         feature: a100, colour: red}
node_classes:
  - {name: c, nodes: "gpu[01-02]", gpu_type: h200, gpus_per_node: 8, leaf_switch: l1,
     features: [a100], cpus: 8, memory_mb: 1000}
budgets:
  org: ml
  programs:
    - {name: p1, weight: 1, projects: [{name: q, weight: 1, users: [alice]}]}
    - {name: p2, weight: 0, projects: [{name: r, weight: 1, users: [bob]}]}
"""


def test_config_check_valid() -> None:
    res = CliRunner().invoke(main, ["config", "check", EXAMPLE])
    assert res.exit_code == 0, res.output
    assert "OK (6 nodes" in res.output


def test_config_check_reports_every_error_with_path(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    res = CliRunner().invoke(main, ["config", "check", str(f)])
    assert res.exit_code == 2
    out = res.output
    assert "gpu_types.a100.memory_gb: must be > 0" in out
    assert "gpu_types.a100.colour: unknown key" in out
    assert "node_classes[0].gpu_type: unknown GPU type 'h200'" in out
    assert "budgets.programs[1].weight: must be > 0" in out
    res = CliRunner().invoke(main, ["config", "check", "--json", str(f)])
    data = json.loads(res.output)
    assert res.exit_code == 2 and data["valid"] is False and len(data["errors"]) >= 4


def test_config_check_missing_file(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["config", "check", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2


def test_db_migrate_unreachable_is_a_named_error() -> None:
    dsn = "postgresql://u:secretpw@127.0.0.1:1/x"
    res = CliRunner().invoke(main, ["db", "migrate", "--dsn", dsn])
    assert res.exit_code == 1
    assert "127.0.0.1:1" in res.output and "secretpw" not in res.output


def test_devcluster_help_lists_commands() -> None:
    res = CliRunner().invoke(main, ["devcluster", "--help"])
    assert res.exit_code == 0
    for cmd in ("up", "down", "status", "env", "demo"):
        assert cmd in res.output


def test_devcluster_up_as_non_root_says_so(tmp_path: Path) -> None:
    import os
    import sys

    from slurm_ml import proc

    assert os.geteuid() == 0, "the test suite runs as root (CI and make test do)"
    # Import everything first, then drop to nobody: the interpreter may live under /root.
    code = (
        "import os, sys\n"
        "import slurm_ml.cli, slurm_ml.config, slurm_ml.devcluster.cluster, slurm_ml.store\n"
        "import slurm_ml.devcluster.platform, slurm_ml.slurm.render\n"
        "os.setegid(65534); os.seteuid(65534)\n"
        "slurm_ml.cli.main(sys.argv[1:])\n"
    )
    res = proc.run([sys.executable, "-c", code, "devcluster", "up", "--state-dir",
                    str(tmp_path / "s"), "--config", EXAMPLE], check=False, cwd=str(REPO))
    assert res.returncode == 2, res.stderr
    assert "must run as root" in res.stderr


def test_db_migrate_malformed_or_missing_dsn_is_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["db", "migrate", "--dsn", "garbage=="])
    assert res.exit_code == 2 and "invalid PostgreSQL DSN" in res.output
    monkeypatch.delenv("SLURM_ML_DSN", raising=False)
    monkeypatch.delenv("SLURM_ML_CONFIG", raising=False)
    res = CliRunner().invoke(main, ["db", "migrate"])  # the packaged config has no dsn
    assert res.exit_code == 2 and "no database" in res.output
    cfg = tmp_path / "site.yaml"
    cfg.write_text(DEFAULT_CONFIG.read_text().replace(
        'dsn: ""', 'dsn: "postgresql://u@127.0.0.1:1/x"'))
    res = CliRunner().invoke(main, ["db", "migrate", "--config", str(cfg)])
    assert res.exit_code == 1 and "127.0.0.1:1/x" in res.output  # store.dsn was used


def test_db_migrate_with_a_dsn_in_the_environment_reads_no_config(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_ML_DSN", "postgresql://u@127.0.0.1:1/x")
    monkeypatch.setenv("SLURM_ML_CONFIG", str(tmp_path / "missing.yaml"))
    res = CliRunner().invoke(main, ["db", "migrate"])
    assert res.exit_code == 1 and "127.0.0.1:1/x" in res.output  # tried; no config error
