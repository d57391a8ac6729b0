"""`slurm-ml install` is what the running dev cluster runs on: its settings are the ones
slurmctld reports, admission, the prolog and the priority weights it wrote are live, and
install + uninstall on a copy of the dev cluster's etc dir leave it byte-identical."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from node_restore import restore_nodes, slurm_ml_cli
from slurm_jobs import sbatch, show

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster import platform
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.model import ALLOC_QOS, FREE_QOS
from slurm_ml.slurm.client import CliSlurm

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
CONFIG = DEFAULT_CONFIG
NVLINK_DOWN = "azhc_a100_gpu6_nvlink_status_all_inactive.txt"


@pytest.fixture(scope="module")
def cluster(slurm_conf: str) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(CONFIG), Layout(root), say=lambda _m: None, config_path=CONFIG)


@pytest.fixture
def jobs() -> Iterator[list[int]]:
    ids: list[int] = []
    yield ids
    if ids:
        proc.run(["scancel", *map(str, ids)], check=False)


def cli(*args: str, env: dict[str, str] | None = None) -> proc.Result:
    return proc.run([sys.executable, "-m", "slurm_ml.cli", *args], check=False, env=env,
                    timeout_s=120)


def config() -> dict[str, str]:
    out = proc.run(["scontrol", "show", "config"]).stdout
    pairs = (line.split("=", 1) for line in out.splitlines() if " = " in line)
    return {k.strip(): v.strip() for k, v in pairs}


def scripts(conf: dict[str, str], key: str) -> list[str]:
    """Prolog or Epilog as ``scontrol show config`` lists it: one ``Prolog = path`` on
    22.05; on 24.11, which takes several scripts, ``Prolog[0] = path``, ``Prolog[1]`` ...
    (and no line at all when none is set). Releases between the two are not checked."""
    if platform.slurm_version()[0] <= 22:
        return [conf[key]]
    assert key not in conf, f"{key} listed without an index on {platform.slurm_version()}"
    out: list[str] = []
    while f"{key}[{len(out)}]" in conf:
        out.append(conf[f"{key}[{len(out)}]"])
    return out


def test_scontrol_shows_the_settings_of_the_include(cluster: DevCluster) -> None:
    etc = cluster.layout.etc
    conf = config()
    assert conf["JobSubmitPlugins"] == "lua"
    assert scripts(conf, "Prolog") == [str(etc / "slurm-ml-prolog")]
    assert scripts(conf, "Epilog") == [str(etc / "slurm-ml-epilog")]
    assert conf["HealthCheckProgram"] == str(etc / "slurm-ml-healthcheck")
    assert conf["PriorityWeightQOS"] == "100000000"
    assert conf["PreemptType"] == "preempt/qos" and conf["PrologFlags"] == "Alloc"
    assert "nohold_on_prolog_fail" in conf["SchedulerParameters"]
    assert "bf_interval=5" in conf["SchedulerParameters"]  # the site's, merged
    part = proc.run(["scontrol", "show", "partition", "gpu"]).stdout
    assert "GRES/gpu:a100_80g=100" in part
    slurm_conf = (etc / "slurm.conf").read_text()
    assert slurm_conf.endswith(f"Include {etc}/slurm-ml.conf\n")
    again = cli("install", "--config", str(CONFIG), "--slurm-conf-dir", str(etc),
                "--no-systemd", "--no-accounts", "--dry-run", "--health-check-interval", "0",
                "--submitd-socket", str(cluster.layout.submitd_socket),
                "--submitd-key", str(cluster.layout.submitd_key),
                *[a for k, v in cluster.install_params().extra_env for a in
                  ("--env", f"{k}={v}")],
                env={"SLURM_ML_DSN": cluster.dsn()})
    assert again.returncode == 0, again.stderr
    assert "nothing to change" in again.stdout  # the CLI plans what `devcluster up` did


def test_the_healthcheck_wrapper_runs_with_slurmds_bare_environment(
        cluster: DevCluster) -> None:
    """As slurmd runs it on 22.05: no PATH, no SLURM_CONF, only SLURMD_NODENAME."""
    hc = cluster.layout.etc / "slurm-ml-healthcheck"
    res = proc.run(["env", "-i", "SLURMD_NODENAME=gpu06", str(hc)], check=False,
                   timeout_s=90)
    assert res.returncode == 0
    log = (cluster.layout.log / "hooks.log").read_text()
    assert "slurm-ml-healthcheck on gpu06: exit 0" in log.splitlines()[-1]


def test_a_submitted_job_is_widened_by_admission(cluster: DevCluster,
                                                 jobs: list[int]) -> None:
    cluster.start_submitd()
    job = sbatch("alice", "--hold", f"--job-name=inst-{uuid.uuid4().hex[:8]}",
                 "--comment=gpu_mem=30G", "--gres=gpu:a100_80g:2", "--wrap", "true",
                 jobs=jobs)
    fields = show(job)
    assert fields["Features"] == "(a100_80g|a100_40g)", fields
    assert fields["TresPerNode"] in ("gres:gpu:2", "gres/gpu:2")
    assert fields["AdminComment"].startswith("slurm-ml {")


# up to 90 s for the drain, 90 s for the requeue, then restore_nodes
@pytest.mark.timeout(600)
def test_an_injected_gpu_fault_drains_the_node_through_the_prolog(
        cluster: DevCluster, jobs: list[int]) -> None:
    assert slurm_ml_cli(cluster, CONFIG, "devcluster", "fault", "gpu03",
                        NVLINK_DOWN).returncode == 0
    try:
        job = sbatch("alice", f"--job-name=inst-{uuid.uuid4().hex[:8]}", "-w", "gpu03",
                     "--gres=gpu:a100_40g:8", "-t", "2", "--wrap", "sleep 1", jobs=jobs)
        deadline = time.monotonic() + 90
        while True:
            gpu03 = {n.name: n for n in CliSlurm(cluster.runner()).list_nodes()}["gpu03"]
            if gpu03.drained or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert gpu03.drained and gpu03.reason.startswith("slurm-ml: nvlink.active_links"), \
            gpu03.reason
        # the prolog exits 1 after draining: Slurm requeues the job (it cannot run
        # elsewhere: -w gpu03)
        requeued_by = time.monotonic() + 90  # Slurm requeues it once the prolog is over
        while int(show(job)["Restarts"]) < 1:
            assert time.monotonic() < requeued_by, show(job)
            time.sleep(1)
        log = (cluster.layout.log / "hooks.log").read_text()
        assert f"slurm-ml-prolog job {job} on gpu03: exit 1" in log
    finally:
        restore_nodes(cluster, CONFIG, jobs)


def test_priority_ranks_by_site_factor_within_qos_tiers(jobs: list[int]) -> None:
    """What the reconciler pushes (per-job SiteFactor) orders jobs, and QOS alloc
    outranks QOS free: the multifactor weights install wrote are live. (Budgets → SiteFactor
    end to end: test_reconciler_cluster.py, on this same installed cluster.)"""
    later = ["--begin=now+1hour", "--gres=gpu:v100:1", "--wrap", "true"]
    low = sbatch("dave", "--account=detection", f"--qos={ALLOC_QOS}", *later, jobs=jobs)
    high = sbatch("alice", "--account=llm-pretrain", f"--qos={ALLOC_QOS}", *later, jobs=jobs)
    free = sbatch("bob", "--account=llm-pretrain", "--time-min=0", *later, jobs=jobs)
    assert show(free)["QOS"] == FREE_QOS
    proc.run(["scontrol", "update", f"jobid={low}", "SiteFactor=1000"])
    proc.run(["scontrol", "update", f"jobid={high},{free}", "SiteFactor=5000"])
    prio = {j: int(show(j)["Priority"]) for j in (low, high, free)}
    assert prio[high] > prio[low] > prio[free], prio


def _snapshot(d: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(d.iterdir()) if p.is_file()}


def test_install_and_uninstall_on_a_copy_of_the_etc_dir(cluster: DevCluster,
                                                        tmp_path: Path) -> None:
    copy = tmp_path / "etc"
    shutil.copytree(cluster.layout.etc, copy)
    assert cli("uninstall", "--slurm-conf-dir", str(copy)).returncode == 0
    site = _snapshot(copy)  # the dev cluster's etc as the site renders it
    assert ".slurm-ml-manifest.json" not in site and "job_submit.lua" not in site
    res = cli("install", "--config", str(CONFIG), "--slurm-conf-dir", str(copy),
              "--no-systemd", "--no-accounts")
    assert res.returncode == 0, res.stderr
    assert f"Include {copy}/slurm-ml.conf" in (copy / "slurm.conf").read_text()
    assert cli("uninstall", "--slurm-conf-dir", str(copy)).returncode == 0
    assert _snapshot(copy) == site
