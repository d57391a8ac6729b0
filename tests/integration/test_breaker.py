"""The circuit breaker on the real dev cluster: a reset starts a fresh window.

The bug this reproduces (seen on the dev cluster): gpu04 was drained for a fault and
resumed, the operator ran ``slurm-ml quarantine reset a100-40g``, and then a real fault
on gpu03 was refused ("not draining gpu03: circuit breaker ...") because gpu04's drain
from before the reset still counted in the window. A reset must start a fresh window.

Everything is real: the periodic check run as HealthCheckProgram runs it, the operator
commands, and a job whose Prolog (run by slurmd) finds the fault on gpu03. The test leaves
the cluster as it found it (``node_restore.restore_nodes``).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from node_restore import node_map, restored, slurm_ml_cli
from slurm_jobs import sbatch, wait_state

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.store.postgres import PostgresStore

pytestmark = pytest.mark.integration
CONFIG = DEFAULT_CONFIG
#: A100 GPU 6 with every NVLink down (Azure HPC health checks' bad_nvlink_status.txt).
NVLINK_DOWN = "azhc_a100_gpu6_nvlink_status_all_inactive.txt"
REASON = "slurm-ml: nvlink.active_links gpu6 (0/12 active)"


@pytest.fixture(scope="module")
def cluster(slurm_conf: str) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(CONFIG), Layout(root), say=lambda _m: None, config_path=CONFIG)


@pytest.fixture
def restore(cluster: DevCluster) -> Iterator[list[int]]:
    """Job ids the test submitted; the cluster is restored before and after it."""
    yield from restored(cluster, CONFIG)


def cli(cluster: DevCluster, *args: str) -> proc.Result:
    res = slurm_ml_cli(cluster, CONFIG, *args)
    assert res.returncode == 0, f"slurm-ml {' '.join(args)}: {res.stdout}{res.stderr}"
    return res


def wait_idle(*names: str, timeout_s: float = 60) -> None:
    """No job holds these nodes (a periodic check defers drains on a busy node)."""
    deadline = time.monotonic() + timeout_s
    while out := proc.run(["squeue", "-h", "-t", "R,CG,S", "-w", ",".join(names), "-o",
                           "%i"], check=False).stdout.split():
        assert time.monotonic() < deadline, f"jobs {out} still on {names}"
        time.sleep(1)


def prolog_log(cluster: DevCluster, job: int) -> list[str]:
    log = cluster.layout.log / "hooks.log"
    return [ln for ln in log.read_text().splitlines() if f"job {job}" in ln]


# up to 60 s for idle nodes, 150 s for the requeued job to complete, then restore_nodes
@pytest.mark.timeout(600)
def test_after_a_class_reset_a_real_fault_on_gpu03_drains_it(
        cluster: DevCluster, restore: list[int], admin_dsn: str) -> None:
    wait_idle("gpu03", "gpu04")
    # gpu04 fails its periodic check and slurm-ml drains it: a100-40g's one drain per
    # window (2 nodes x 20%, at least 1) is used.
    cli(cluster, "devcluster", "fault", "gpu04", NVLINK_DOWN)
    first: dict[str, Any] = json.loads(cli(cluster, "health", "periodic", "--node", "gpu04",
                                           "--json").stdout)
    assert first["action"] == "drained", first
    # repaired, resumed by the operator, and the class reset (as on the dev cluster)
    cli(cluster, "devcluster", "fault", "gpu04", "--clear")
    cli(cluster, "quarantine", "resume", "gpu04")
    reset = json.loads(cli(cluster, "quarantine", "reset", "a100-40g", "--json").stdout)
    assert reset["node_class"] == "a100-40g"
    reset_at = datetime.now().astimezone()

    # Now a real fault on gpu03, found by the Prolog of a job: 8 typed A100-40GB GPUs,
    # only gpu03 or gpu04 can run it, and Slurm allocates the first idle one, gpu03.
    cli(cluster, "devcluster", "fault", "gpu03", NVLINK_DOWN)
    job = sbatch("alice", f"--job-name=breaker-{uuid.uuid4().hex[:8]}",
                 "--gres=gpu:a100_40g:8", "-t", "2", "--wrap", "sleep 3", jobs=restore)
    ran = wait_state(job, {"COMPLETED"}, timeout_s=150)

    gpu03 = node_map(cluster)["gpu03"]
    assert gpu03.drained and gpu03.reason == REASON, (gpu03, prolog_log(cluster, job))
    assert (ran["NodeList"], ran["Restarts"]) == ("gpu04", "1")  # requeued off gpu03
    with PostgresStore(admin_dsn) as store:
        entries = [e for e in store.audit_entries() if e.at >= reset_at]
    drains = [e for e in entries if e.action == "drain" and e.target == "gpu03"]
    assert [(e.details["hook"], e.details["applied"], e.details["job_id"]) for e in drains] == [
        ("prolog", True, job)]
    assert drains[0].details["checks"] == ["nvlink.active_links"]
    assert not [e for e in entries if e.action == "breaker.trip"]  # nothing refused
    assert not [ln for ln in prolog_log(cluster, job) if "circuit breaker" in ln]
