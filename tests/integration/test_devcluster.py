"""The dev cluster as a user sees it: status, env, and billing per GPU type."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.cli import main
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.runner import SlurmRunner

pytestmark = pytest.mark.integration


def _state_dir() -> str:
    state = os.environ.get("SLURM_ML_DEVCLUSTER")
    if not state:
        pytest.fail("SLURM_ML_DEVCLUSTER is not set: run `make test`", pytrace=False)
    return state


def test_status_json_shows_every_daemon_node_and_researcher(slurm_conf: str) -> None:
    res = CliRunner().invoke(main, ["devcluster", "status", "--json", "--state-dir",
                                    _state_dir()])
    assert res.exit_code == 0, res.output
    st = json.loads(res.output)
    assert st["up"] is True
    for name in ("munged", "mariadb", "slurmdbd", "slurmctld", "postgresql",
                 *(f"slurmd-gpu0{i}" for i in range(1, 7))):
        assert st["processes"][name]["running"], name
    assert st["processes"]["slurmd-cpu01"]["running"]  # the site's own CPU node
    nodes = {n["name"]: n for n in st["nodes"] if n["name"].startswith("gpu")}
    assert sorted(nodes) == [f"gpu0{i}" for i in range(1, 7)]
    assert sorted(n["name"] for n in st["nodes"]) == ["cpu01", *sorted(nodes)]
    assert [nodes[n]["gpus"] for n in sorted(nodes)] == [8, 8, 8, 8, 4, 4]
    assert nodes["gpu03"]["gpu_type"] == "a100_40g" and "nvlink" in nodes["gpu03"]["features"]
    users = {u["user"]: u["accounts"] for u in st["users"]}
    assert users["alice"] == ["llm-pretrain", "detection"] and users["carol"] == ["llm-eval"]
    assert "SLURM_ML_DSN" not in json.dumps(st)  # no password in status output


def test_no_password_on_any_command_line(slurm_conf: str) -> None:
    """submitd, the hooks and the databases get their secrets from env files (mode 0600),
    never from argv, which every user on the host can read with ps."""
    secrets = json.loads((Path(_state_dir()) / "etc" / "secrets.json").read_text())
    passwords = [v for v in secrets.values() if isinstance(v, str) and len(v) >= 8]
    assert passwords, f"no passwords found in secrets.json: {sorted(secrets)}"
    args = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True,
                          timeout=30).stdout
    assert "slurm_ml.cli -v submitd" in args  # the dev cluster's submitd is running
    leaked = [line for line in args.splitlines() if any(pw in line for pw in passwords)]
    assert not leaked, f"a password on a command line: {leaked}"


def test_slurmdbd_associations_match_the_budget_tree(slurm_conf: str) -> None:
    run = SlurmRunner(env={"SLURM_CONF": slurm_conf})
    out = run(["sacctmgr", "-n", "-P", "show", "assoc", "format=Account,ParentName,User,QOS"])
    rows = {tuple(line.split("|")[:3]) for line in out.splitlines()}
    assert ("llm-pretrain", "nlp", "") in rows and ("detection", "vision", "") in rows
    assert ("llm-pretrain", "", "alice") in rows or ("llm-pretrain", "nlp", "alice") in rows
    qos = run(["sacctmgr", "-n", "-P", "show", "qos", "format=Name,UsageFactor,PreemptMode"])
    assert "free|0.000000|requeue" in qos


def test_env_prints_the_exports(slurm_conf: str) -> None:
    res = CliRunner().invoke(main, ["devcluster", "env", "--state-dir", _state_dir()])
    assert res.exit_code == 0
    assert f"export SLURM_CONF={slurm_conf}" in res.output
    assert "export SLURM_ML_DSN=postgresql://" in res.output


def test_billing_follows_gpu_type_weights(slurm_conf: str) -> None:
    nodes = {n.name: n for n in CliSlurm(SlurmRunner(env={"SLURM_CONF": slurm_conf}))
             .list_nodes()}
    assert nodes["gpu01"].gpu_type == "a100_80g"
    run = SlurmRunner(env={"SLURM_CONF": slurm_conf})
    conf = run(["scontrol", "show", "partition", "gpu"])
    assert "GRES/gpu:a100_40g=80" in conf and "GRES/gpu:v100=40" in conf


def test_up_leaves_an_admins_drain_alone(slurm_conf: str) -> None:
    """`devcluster up` on a running cluster keeps a drain an admin set, as slurm-ml itself
    does everywhere: it says how to lift it instead of lifting it."""
    slurm = CliSlurm(SlurmRunner(env={"SLURM_CONF": slurm_conf}))
    slurm.drain_node("gpu06", "maintenance: rack 4")
    try:
        res = subprocess.run([sys.executable, "-m", "slurm_ml.cli", "devcluster", "up",
                              "--no-install", "--state-dir", _state_dir()],
                             capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
        gpu06 = next(n for n in slurm.list_nodes() if n.name == "gpu06")
        assert gpu06.drained and gpu06.reason == "maintenance: rack 4", gpu06
        assert "gpu06 stays drained (maintenance: rack 4)" in res.stdout + res.stderr
    finally:
        slurm.resume_node("gpu06")
