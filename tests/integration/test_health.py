"""Node health end to end on the real dev cluster: faults injected into a node's replayed
captures, the real Prolog/Epilog run by slurmd (slurm-ml-prolog and slurm-ml-epilog,
the installed copies of prolog/slurm-ml-hook), ``slurm-ml health periodic`` and ``slurm-ml quarantine`` run as
commands, everything recorded in the dev cluster's PostgreSQL.

Every test leaves the cluster as it found it (``restore``): faults cleared, the test's
drains lifted, breaker alarms reset, its jobs cancelled, its leftover processes gone.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from node_restore import node_map, restored, slurm_ml_cli
from slurm_jobs import sbatch, show, wait_state

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.store.postgres import PostgresStore

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
CONFIG = DEFAULT_CONFIG
#: A100 GPU 6 with every NVLink down (Azure HPC health checks' bad_nvlink_status.txt).
NVLINK_DOWN = "azhc_a100_gpu6_nvlink_status_all_inactive.txt"
ADMIN_REASON = "admin: test"
PASSES = load_config(CONFIG).policy.quarantine.resume_after_passes


@pytest.fixture(scope="module")
def cluster(slurm_conf: str) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(CONFIG), Layout(root), say=lambda _m: None, config_path=CONFIG)


def cli(cluster: DevCluster, *args: str, check: bool = True) -> proc.Result:
    """``slurm-ml ARGS`` as an operator on the dev cluster runs it."""
    res = slurm_ml_cli(cluster, CONFIG, *args)
    if check:
        assert res.returncode == 0, f"slurm-ml {' '.join(args)}: {res.stdout}{res.stderr}"
    return res


def periodic(cluster: DevCluster, node: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cli(cluster, "health", "periodic", "--node", node,
                                         "--json").stdout)
    return out


nodes = node_map  # name -> Node, as slurmctld reports it


def owned_drains(cluster: DevCluster) -> set[str]:
    return {n for n, x in nodes(cluster).items() if x.drained and x.reason.startswith("slurm-ml:")}




def wait_idle(cluster: DevCluster, *names: str, timeout_s: float = 60) -> None:
    """No job holds these nodes (a job of an earlier test may still be completing): a
    periodic check defers drains on a busy node."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = proc.run(["squeue", "-h", "-t", "R,CG,S", "-w", ",".join(names), "-o", "%i"],
                       check=False).stdout.split()
        if not out:
            return
        assert time.monotonic() < deadline, f"jobs {out} still on {names}"
        time.sleep(1)


@pytest.fixture
def restore(cluster: DevCluster) -> Iterator[list[int]]:
    """Job ids the test submitted; the cluster is restored before and after it."""
    yield from restored(cluster, CONFIG, reasons=(ADMIN_REASON,))


# up to 60 s for idle nodes, 150 s for the requeued job to complete, then restore_nodes
@pytest.mark.timeout(600)
def test_fault_on_gpu03_drains_it_in_the_prolog_and_the_job_runs_on_gpu04(
        cluster: DevCluster, restore: list[int], admin_dsn: str) -> None:
    wait_idle(cluster, "gpu03", "gpu04")
    cli(cluster, "devcluster", "fault", "gpu03", NVLINK_DOWN)
    # 8 typed A100-40GB GPUs: only gpu03 or gpu04 can run it, and the job holds GPU 6 (a
    # unique name: no GPU memory profile, so admission does not widen the type). Both are
    # idle; Slurm allocates the first, gpu03, whose prolog finds the fault.
    job = sbatch("alice", f"--job-name=health-{uuid.uuid4().hex[:8]}",
                 "--gres=gpu:a100_40g:8", "-t", "2", "--wrap", "sleep 3", jobs=restore)

    # Requeued after the failed prolog, it may start again after cred_expire + 1 s (31 s)
    # and the next backfill pass (bf_interval=5 on the dev cluster). (While a prolog runs
    # the job already reads RUNNING, on the node being checked: wait for the end.)
    ran = wait_state(job, {"COMPLETED"}, timeout_s=150)

    assert ran["NodeList"] == "gpu04"
    assert ran["Restarts"] == "1"  # it was started once before: on gpu03
    gpu03 = nodes(cluster)["gpu03"]
    assert gpu03.drained
    assert gpu03.reason == "slurm-ml: nvlink.active_links gpu6 (0/12 active)"
    sinfo = proc.run(["sinfo", "-R", "-h", "-n", "gpu03", "-o", "%E"]).stdout.strip()
    assert sinfo.startswith("slurm-ml: nvlink.active_links gpu6")
    with PostgresStore(admin_dsn) as store:
        drains = [e for e in store.audit_entries() if e.action == "drain"
                  and e.target == "gpu03" and e.details.get("job_id") == job]
    assert [(e.actor, e.details["hook"], e.details["applied"]) for e in drains] == [
        ("slurm-ml/prolog", "prolog", True)]
    assert drains[0].details["findings"][0]["check_id"] == "nvlink.active_links"


def test_repaired_gpu03_resumes_itself_after_n_clean_periodic_checks(
        cluster: DevCluster, restore: list[int]) -> None:
    wait_idle(cluster, "gpu03")
    cli(cluster, "devcluster", "fault", "gpu03", NVLINK_DOWN)
    assert periodic(cluster, "gpu03")["action"] == "drained"
    assert periodic(cluster, "gpu03")["action"] == "held"  # still faulty: streak 0

    cli(cluster, "devcluster", "fault", "gpu03", "--clear")
    runs = [periodic(cluster, "gpu03") for _ in range(PASSES)]

    assert [r["action"] for r in runs] == ["held"] * (PASSES - 1) + ["resumed"]
    assert [r["streak"] for r in runs] == list(range(1, PASSES + 1))
    assert "gpu03" not in owned_drains(cluster)
    assert not nodes(cluster)["gpu03"].drained


def test_a_drain_by_an_admin_is_never_resumed(cluster: DevCluster,
                                              restore: list[int]) -> None:
    proc.run(["scontrol", "update", "nodename=gpu05", "state=drain",
              f"reason={ADMIN_REASON}"])

    runs = [periodic(cluster, "gpu05") for _ in range(PASSES + 1)]
    refused = cli(cluster, "quarantine", "resume", "gpu05", check=False)

    assert {r["action"] for r in runs} == {"foreign_drain"}
    assert all(r["passed"] for r in runs)  # healthy, and still not resumed
    gpu05 = nodes(cluster)["gpu05"]
    assert gpu05.drained and gpu05.reason == ADMIN_REASON
    assert refused.returncode == 1
    assert "drained by someone else" in refused.stderr and "--force" in refused.stderr


def test_faults_on_a_whole_class_drain_no_more_than_the_breaker_allows(
        cluster: DevCluster, restore: list[int]) -> None:
    wait_idle(cluster, "gpu01", "gpu02")
    for node in ("gpu01", "gpu02"):
        cli(cluster, "devcluster", "fault", node, NVLINK_DOWN)

    first, second = periodic(cluster, "gpu01"), periodic(cluster, "gpu02")

    # a100-80g has 2 nodes: 20% of it rounds down, and the budget is at least 1 drain.
    assert first["action"] == "drained"
    assert second["action"] == "refused"
    assert "circuit breaker tripped" in second["message"]
    assert owned_drains(cluster) & {"gpu01", "gpu02"} == {"gpu01"}
    view = json.loads(cli(cluster, "quarantine", "list", "--json").stdout)
    [alarm] = [a for a in view["alarms"] if a["node_class"] == "a100-80g"]
    assert alarm["refused"] == "gpu02" and alarm["drained"] == ["gpu01"]
    assert [d["node"] for d in view["drains"]] == ["gpu01"]
    # While the alarm is up, gpu02 stays in service however often it is checked.
    assert periodic(cluster, "gpu02")["action"] == "refused"

    reset = cli(cluster, "quarantine", "reset", "a100-80g", "--json")

    assert json.loads(reset.stdout)["cleared"] >= 1
    view = json.loads(cli(cluster, "quarantine", "list", "--json").stdout)
    assert not [a for a in view["alarms"] if a["node_class"] == "a100-80g"]


HOLD = """#!/bin/bash
# leave: start a GPU process that outlives the job (setsid: proctrack/linuxproc loses it)
# stay:  hold the GPU in the job's own process until the job ends
DEV={dev}/nvidia${{SLURM_JOB_GPUS%%,*}}
if [ "$1" = leave ]; then
  setsid bash -c "exec 3<$DEV; echo \\$\\$ > {jobs}/pid.$SLURM_JOB_ID; exec sleep 300" \\
    </dev/null >/dev/null 2>&1 &
  sleep 1
else
  exec 3<$DEV
  echo $$ > {jobs}/pid.$SLURM_JOB_ID
  exec sleep 120
fi
"""


def _pid(path: Path, timeout_s: float = 30) -> int:
    deadline = time.monotonic() + timeout_s
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.5)
    return int(path.read_text())


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def test_epilog_kills_the_finished_jobs_leftover_but_not_the_users_other_job(
        cluster: DevCluster, restore: list[int]) -> None:
    """Driven through slurmd: job A leaves a process behind that holds its GPU (the dev
    GPUs are device files; ``health.probe_devfiles`` reports their holders as the GPU's
    processes), job B of the same user holds a GPU on the same node. A's epilog must kill
    A's leftover, identified by its SLURM_JOB_ID, and leave B's process alone."""
    jobs_dir = cluster.layout.jobs
    script = jobs_dir / f"hold-{uuid.uuid4().hex[:8]}.sh"
    script.write_text(HOLD.format(dev=cluster.layout.dev, jobs=jobs_dir))
    script.chmod(0o755)
    log = cluster.layout.log / "hooks.log"
    pids: list[int] = []
    try:
        wait_idle(cluster, "gpu06")
        b = sbatch("alice", "-w", "gpu06", "--gres=gpu:1", "-t", "2", str(script), "stay",
                   jobs=restore)
        pids.append(_pid(jobs_dir / f"pid.{b}"))
        a = sbatch("alice", "-w", "gpu06", "--gres=gpu:1", "-t", "2", str(script), "leave",
                   jobs=restore)
        pids.append(_pid(jobs_dir / f"pid.{a}"))
        leftover, other = pids[1], pids[0]

        wait_state(a, {"COMPLETED"}, timeout_s=60)  # COMPLETING lasts until the epilog ends
        deadline = time.monotonic() + 20
        while _alive(leftover) and time.monotonic() < deadline:
            time.sleep(0.5)

        assert not _alive(leftover), "the epilog left job A's GPU process running"
        assert _alive(other), "the epilog killed job B's process"
        assert show(b)["JobState"] == "RUNNING"
        lines = [ln for ln in log.read_text().splitlines()
                 if "slurm-ml epilog: " in ln and f"job {a}:" in ln]
        assert lines, f"no epilog line for job {a} in {log}"
        assert "killed 1 GPU process(es), 0 survived" in lines[-1]
        assert f"alice still has job(s) {b} on gpu06" in lines[-1]  # /dev/shm left alone
    finally:
        for pid in pids:  # only the processes this test started
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for p in [script, *jobs_dir.glob("pid.*")]:
            if p.name.startswith("pid.") and int(p.name[4:]) not in restore:
                continue
            p.unlink(missing_ok=True)
