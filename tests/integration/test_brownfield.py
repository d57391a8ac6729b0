"""Admission on the brownfield dev cluster (issue 14): the site's own account ``physics``
(QOS ``normal,long`` of its own), its user ``eve`` (default account physics), root, the
CPU-only partition ``cpu`` and the reservation, all made before ``slurm-ml install``.

Before policy.admission.unbudgeted, eve's ``sbatch -p gpu --gpus=1`` failed with
"Account (none) has no GPU-time budget ... Invalid qos specification". It must be
accepted, and run, in both modes, with a message that names physics.
"""

from __future__ import annotations

import copy
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from slurm_jobs import show, wait_state

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.deploy.install import install
from slurm_ml.devcluster import brownfield
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.slurm import accounts

pytestmark = pytest.mark.integration

GRANT_ROOT = "sacctmgr -i modify account where name=root cluster=slurmml set qos+=free"
GRANT_PHYSICS = "sacctmgr -i modify account where name=physics cluster=slurmml set qos+=free"
INVALID_QOS = "Invalid qos specification"


def _cluster(config: Path) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(config), Layout(root), say=lambda _m: None,
                      config_path=config)


@pytest.fixture
def jobs(slurm_conf: str) -> Iterator[list[int]]:
    ids: list[int] = []
    yield ids
    if ids:
        proc.run(["scancel", *map(str, ids)], check=False, env={"SLURM_CONF": slurm_conf})


def sbatch(user: str, *args: str, jobs: list[int]) -> proc.Result:
    workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    argv = ["sbatch", "--parsable", f"--chdir={workdir}", "--output=/dev/null", *args]
    if user != "root":
        argv = ["runuser", "-u", user, "--", *argv]
    res = proc.run(argv, check=False, timeout_s=30)
    if res.returncode == 0:
        jobs.append(int(res.stdout.strip().split(";")[0]))
    return res


def _assoc_qos(account: str, user: str = "") -> set[str]:
    out = proc.run(["sacctmgr", "-n", "-P", "show", "assoc", f"account={account}",
                    "format=Account,User,QOS"]).stdout
    for line in out.splitlines():
        acc, usr, qos = line.split("|")[:3]
        if acc == account and usr == user:
            return set(filter(None, qos.split(",")))
    raise AssertionError(f"no association {account}/{user}: {out!r}")


@pytest.fixture
def untouched(slurm_conf: str) -> Iterator[DevCluster]:
    """submitd with the dev cluster's own config (unbudgeted: untouched, the default)."""
    cluster = _cluster(DEFAULT_CONFIG)
    assert cluster.cfg.policy.admission.unbudgeted == "untouched"
    cluster.start_submitd()
    yield cluster


@pytest.fixture
def free_mode(slurm_conf: str, tmp_path: Path) -> Iterator[tuple[DevCluster, str]]:
    """submitd restarted with unbudgeted: free, and install's QOS grant run on the real
    slurmdbd; afterwards the grant is undone and submitd runs its own config again."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    data = copy.deepcopy(data)
    data["policy"]["admission"]["unbudgeted"] = "free"
    path = tmp_path / "slurm-ml-free.yaml"
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o644)
    default, free = _cluster(DEFAULT_CONFIG), _cluster(path)
    plan = install(free.cfg, free.install_params(), run=free.runner(60), dry_run=True)
    shown = plan.render(diff=True)
    commands = [list(c) for c in plan.accounts.commands]
    runner = free.runner(60)
    try:
        for cmd in commands:
            runner(cmd)
        default.stop_submitd()
        free.start_submitd()
        yield free, shown
    finally:
        free.stop_submitd()
        for cmd in (accounts.revoke_root_qos("slurmml"),
                    GRANT_PHYSICS.replace("qos+=", "qos-=").split()):
            runner(cmd)
        default.start_submitd()


def test_the_site_part_exists_before_and_apart_from_slurm_ml(slurm_conf: str) -> None:
    out = proc.run(["sacctmgr", "-n", "-P", "show", "user", "format=User,DefaultAccount"])
    assert "eve|physics" in out.stdout.splitlines()
    assert _assoc_qos("physics") >= {"normal", brownfield.SITE_QOS}
    assert "free" not in _assoc_qos("physics", "eve")  # untouched: nothing granted
    res = proc.run(["scontrol", "-o", "show", "reservation", brownfield.RESERVATION])
    assert f"Nodes={brownfield.CPU_NODE}" in res.stdout
    part = proc.run(["scontrol", "-o", "show", "partition", brownfield.CPU_PARTITION]).stdout
    assert "TRESBillingWeights" not in part  # install leaves the site's partition alone


@pytest.mark.parametrize("user", ["eve", "root"])
def test_untouched_outside_the_tree_is_accepted_with_its_qos_and_runs(
        untouched: DevCluster, jobs: list[int], user: str) -> None:
    res = sbatch(user, "-p", "gpu", "--gpus=1", "--wrap", "sleep 1", jobs=jobs)
    assert res.returncode == 0, res.stderr
    assert INVALID_QOS not in res.stderr
    account = "physics" if user == "eve" else "root"
    assert f"Account {account} (your default account) has no GPU-time budget" in res.stderr
    assert "keeps its association's default QOS" in res.stderr
    job = show(jobs[0])
    assert job["QOS"] == "normal" and job["Account"] == account
    wait_state(jobs[0], {"COMPLETED"})


def test_untouched_keeps_the_sites_own_qos(untouched: DevCluster, jobs: list[int]) -> None:
    res = sbatch("eve", "-p", "gpu", "--qos=long", "--gpus=1", "--wrap", "sleep 1", jobs=jobs)
    assert res.returncode == 0, res.stderr
    assert show(jobs[0])["QOS"] == "long"


def test_free_mode_grants_qos_free_and_routes_outside_jobs_there(
        free_mode: tuple[DevCluster, str], jobs: list[int]) -> None:
    shown = free_mode[1]
    assert GRANT_ROOT in shown and GRANT_PHYSICS in shown  # the plan and --diff show it
    assert "free" in _assoc_qos("physics", "eve") and "free" in _assoc_qos("root", "root")
    for user, account in (("eve", "physics"), ("root", "root")):
        res = sbatch(user, "-p", "gpu", "--gpus=1", "--wrap", "sleep 1", jobs=jobs)
        assert res.returncode == 0, res.stderr
        assert INVALID_QOS not in res.stderr
        assert (f"Account {account} (your default account) has no GPU-time budget, so the "
                f"job runs in QOS free") in res.stderr
        job = show(jobs[-1])
        assert job["QOS"] == "free" and job["Account"] == account
    for jid in jobs:
        wait_state(jid, {"COMPLETED"})


def test_free_mode_install_plan_is_empty_once_granted(
        free_mode: tuple[DevCluster, str]) -> None:
    free, _shown = free_mode
    again = install(free.cfg, free.install_params(), run=free.runner(60), dry_run=True)
    assert [shlex.join(c) for c in again.accounts.commands] == []


def test_cpu_partition_job_passes_untouched_and_runs(untouched: DevCluster,
                                                     jobs: list[int]) -> None:
    res = sbatch("eve", "-p", brownfield.CPU_PARTITION, "--wrap", "sleep 1", jobs=jobs)
    assert res.returncode == 0, res.stderr
    assert "slurm-ml" not in res.stderr
    wait_state(jobs[0], {"COMPLETED"})


def test_untouched_job_cannot_move_itself_into_alloc(untouched: DevCluster,
                                                      jobs: list[int]) -> None:
    """physics has no budget: an update into alloc is refused by admission first."""
    res = sbatch("eve", "--hold", "-p", "gpu", "--gpus=1", "--wrap", "true", jobs=jobs)
    assert res.returncode == 0, res.stderr
    asked = proc.run(["runuser", "-u", "eve", "--", "scontrol", "update", f"JobId={jobs[0]}",
                      "QOS=alloc"], check=False)
    assert asked.returncode != 0
    assert "accounting/QOS policy" in asked.stderr, asked.stderr
    assert show(jobs[0])["QOS"] == "normal"
