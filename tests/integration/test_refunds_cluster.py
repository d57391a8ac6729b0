"""Fault refunds on the real dev cluster (issue 16 item 7).

alice's job runs on gpu03; while it runs, gpu03's NVLinks go down (a fault injected into
its replayed captures). The job fails, and the real Epilog finds the fault on its GPUs
and drains gpu03, naming the job. One cycle of the real daemon records the refund, once,
with that drain; ``budget status`` shows the hours apart and leaves them out of
delivered. (A periodic check defers its drain while jobs run: the epilog is the hook that
drains a node whose job a fault just ended.)

The Epilog writes to the cluster's own database, so the daemon and ``budget status`` read
that one, with a short window (only this test's run counts) and their own lock key.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from node_restore import node_map, restored
from slurm_jobs import daemon_config, sbatch, wait_state

from slurm_ml import proc
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.store.postgres import PostgresStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
NODE = "gpu03"  # a100-40g
#: A100 GPU 6 with every NVLink down (Azure HPC health checks' bad_nvlink_status.txt).
NVLINK_DOWN = "azhc_a100_gpu6_nvlink_status_all_inactive.txt"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return daemon_config(tmp_path_factory.mktemp("refunds") / "slurm-ml.yaml",
                         fairshare={"window_hours": 0.25, "owed_bucket_s": 60},
                         reclaim={"fix_runaway": False})


@pytest.fixture(scope="module")
def cluster(slurm_conf: str, config: Path) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(config), Layout(root), say=lambda _m: None,
                      config_path=config)


def run(cluster: DevCluster, config: Path, dsn: str, *args: str) -> str:
    """``slurm-ml ARGS`` as an operator runs it."""
    env = {**os.environ, **cluster.env_exports(), "SLURM_ML_CONFIG": str(config),
           "SLURM_ML_DSN": dsn}
    res = proc.run([sys.executable, "-m", "slurm_ml.cli", *args], check=False, env=env,
                   timeout_s=180)
    assert res.returncode == 0, f"slurm-ml {' '.join(args)}: {res.stdout}\n{res.stderr[-3000:]}"
    return res.stdout


@pytest.fixture
def restore(cluster: DevCluster, config: Path) -> Iterator[list[int]]:
    """Job ids the test submitted; the cluster is restored before and after it."""
    yield from restored(cluster, config)


def _refund_rows(dsn: str, job: int) -> list[Any]:
    with PostgresStore(dsn) as store:
        return [e for e in store.audit_entries() if e.action == "refund"
                and e.target == f"job {job}"]


def test_a_job_a_gpu_fault_ended_is_refunded_once_and_shown_apart(
        cluster: DevCluster, config: Path, admin_dsn: str, restore: list[int]) -> None:
    deadline = time.monotonic() + 60
    while proc.run(["squeue", "-h", "-t", "R,CG", "-w", NODE, "-o", "%i"],
                   check=False).stdout.strip():
        assert time.monotonic() < deadline, f"jobs still on {NODE}"
        time.sleep(1)
    # The script marks its start: a job reads RUNNING while its prolog still runs, and a
    # fault the prolog finds requeues the job instead.
    where = Path(os.environ["SLURM_ML_DEVCLUSTER"]) / "jobs" / f"refund-{uuid.uuid4().hex[:8]}"
    where.mkdir()
    where.chmod(0o777)  # alice's job writes there
    marker = where / "started"
    job = sbatch("alice", "--account=llm-pretrain", "--gres=gpu:a100_40g:8", f"-w{NODE}",
                 "--time=5", f"--job-name={where.name}", "--wrap",
                 f"touch {marker}; sleep 25; exit 1", jobs=restore)
    wait_state(job, {"RUNNING"}, timeout_s=120)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the job's script never started"
        time.sleep(0.5)
    marker.unlink()
    run(cluster, config, admin_dsn, "devcluster", "fault", NODE, NVLINK_DOWN)
    wait_state(job, {"FAILED"}, timeout_s=120)
    deadline = time.monotonic() + 60
    while not node_map(cluster)[NODE].drained:  # the epilog drains it as the job ends
        assert time.monotonic() < deadline, node_map(cluster)[NODE]
        time.sleep(1)
    with PostgresStore(admin_dsn) as store:
        drains = [e for e in store.audit_entries() if e.action == "drain"
                  and e.target == NODE and e.details.get("job_id") == job]
    assert [(d.details["hook"], d.details["applied"]) for d in drains] == [("epilog", True)]

    # sacct names the node the run used (the NodeList slurm-ml now reads)
    now = int(time.time())
    (used,) = [u for u in CliSlurm().job_usage(now - 900, now) if u.job_id == job]
    assert (used.nodes, used.state.value) == (NODE, "FAILED")

    run(cluster, config, admin_dsn, "daemon", "--config", str(config), "--once", "--json")
    rows = _refund_rows(admin_dsn, job)
    done = [r for r in rows if r.details.get("phase") == "done"]
    assert len(rows) == 2 and len(done) == 1, rows  # one action: intent and done
    assert done[0].details["drain"]["key"] == drains[0].idempotency_key
    assert (done[0].details["drain"]["node"], done[0].details["drain"]["hook"]) == (
        NODE, "epilog")
    assert "nvlink.active_links" in done[0].details["drain"]["findings"]
    assert done[0].details["gpu_hours"] == pytest.approx(8 * used.elapsed_s / 3600, abs=1e-3)

    status = json.loads(run(cluster, config, admin_dsn, "budget", "status", "--json"))
    (refund,) = [r for r in status["refunds"] if r["job_id"] == job]
    assert (refund["route"], refund["drain"]["node"]) == ("job", NODE)
    row = next(r for r in status["nodes"] if r["kind"] == "project"
               and r["account"] == "llm-pretrain")
    # every refund of the team in the window (earlier tests' faults count too), this one's
    # among them
    mine = [r["gpu_hours"] for r in status["refunds"] if r["account"] == "llm-pretrain"]
    assert row["refunded_gpu_hours"] == pytest.approx(sum(mine), abs=0.01 * len(mine)), (
        status["refunds"])  # each rounded to 0.01
    print(json.dumps(status["refunds"], indent=1))  # what the window refunded, for the log
    assert row["refunded_gpu_hours"] >= refund["gpu_hours"] > 0

    run(cluster, config, admin_dsn, "daemon", "--config", str(config), "--once", "--json")
    assert len(_refund_rows(admin_dsn, job)) == 2  # recorded once
