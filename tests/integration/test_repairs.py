"""Repairs at the contract on the real dev cluster: a drain-after-job fault injected on a
busy node; the daemon drains the node (owned), requeues its resumable job once the
job's protected runtime has ended (not before), and after the fault is cleared the
periodic checks resume the node with no action by hand.

The periodic checks and the daemon share one fresh database (the daemon's drain is what
the periodic check's resume reads back); the Prolog/Epilog write to the cluster's own.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from node_restore import node_map, restored
from slurm_jobs import sbatch, show, wait_state

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.store.postgres import PostgresStore

pytestmark = pytest.mark.integration
NODE = "gpu03"  # a100-40g; gpu04 is the other one of its class
REMAP = "ecc/mleng_a100x8_q_excerpt_remap_pending.txt"
PROTECT_MIN = 2


def write_config(path: Path) -> Path:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    pol = data["policy"]
    pol["contracts"].update(requeue_grace_s=0, preempt_cap_fraction=1.0)
    data["daemon"].update(metrics_port=0, lock_key=int(uuid.uuid4().int % (2**62)) + 1,
                          wake_socket="")
    data["store"]["spool_dir"] = str(path.parent / "spool")
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("repairs") / "slurm-ml.yaml")


@pytest.fixture(scope="module")
def cluster(slurm_conf: str, config: Path) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(config), Layout(root), say=lambda _m: None,
                      config_path=config)


def run(cluster: DevCluster, config: Path, dsn: str, *args: str) -> proc.Result:
    """``slurm-ml ARGS`` as an operator runs it, against the test's database."""
    env = {**os.environ, **cluster.env_exports(), "SLURM_ML_CONFIG": str(config),
           "SLURM_ML_DSN": dsn}
    return proc.run([sys.executable, "-m", "slurm_ml.cli", *args], check=False, env=env,
                    timeout_s=180)


def ok(res: proc.Result) -> str:
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr[-3000:]}"
    return res.stdout


def periodic(cluster: DevCluster, config: Path, dsn: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(ok(run(cluster, config, dsn, "health", "periodic",
                                            "--node", NODE, "--json")))
    return out


def daemon_once(cluster: DevCluster, config: Path, dsn: str) -> None:
    ok(run(cluster, config, dsn, "daemon", "--config", str(config), "--once", "--json"))


def started(job: int) -> float:
    return datetime.fromisoformat(show(job)["StartTime"]).timestamp()


@pytest.fixture
def restore(cluster: DevCluster, config: Path) -> Iterator[list[int]]:
    """Job ids the test submitted; the cluster is restored before and after it."""
    yield from restored(cluster, config)


@pytest.mark.timeout(600)
def test_a_remap_fault_drains_the_node_requeues_after_protection_and_resumes(
        cluster: DevCluster, config: Path, pg_module_dsn: str, restore: list[int]) -> None:
    dsn = pg_module_dsn
    daemon_once(cluster, config, dsn)  # its first start migrates the fresh database
    job = sbatch("alice", "--account=llm-pretrain", "--gres=gpu:a100_40g:8", f"-w{NODE}",
                 "--requeue", f"--time-min={PROTECT_MIN}", "--time=15", "--wrap",
                 "sleep 900", jobs=restore)
    wait_state(job, {"RUNNING"})
    ok(run(cluster, config, dsn, "devcluster", "fault", NODE, REMAP))

    found = periodic(cluster, config, dsn)
    assert (found["action"], found["store_errors"]) == ("deferred", [])  # busy: after the job
    daemon_once(cluster, config, dsn)
    node = node_map(cluster)[NODE]
    assert node.drained and node.reason.startswith("slurm-ml:"), node
    daemon_once(cluster, config, dsn)  # drained now; the job is still protected
    protected_until = started(job) + PROTECT_MIN * 60
    assert time.time() < protected_until, "the test was too slow to see the protection"
    assert show(job)["JobState"] == "RUNNING" and show(job).get("Restarts") == "0"
    listed = json.loads(ok(run(cluster, config, dsn, "quarantine", "list", "--json")))
    (rep,) = [r for r in listed["repairs"] if r["node"] == NODE]
    assert [(j["job_id"], j["kind"]) for j in rep["jobs"]] == [(job, "protected")]
    why = ok(run(cluster, config, dsn, "why", str(job)))
    assert "Repair at the contract" in why and "protected until" in why

    time.sleep(max(0.0, protected_until - time.time()) + 2)
    daemon_once(cluster, config, dsn)
    deadline = time.monotonic() + 60
    while show(job).get("Restarts") == "0" and time.monotonic() < deadline:
        time.sleep(1)
    assert show(job)["Restarts"] != "0", show(job)
    # back in the queue; the node stays drained, so it cannot restart on the bad node
    wait_state(job, {"PENDING"}, timeout_s=60)
    assert node_map(cluster)[NODE].drained
    with PostgresStore(dsn) as store:
        kinds = [d.kind for d in store.decisions_for_job(job) if not d.dry_run]
    assert kinds.count("repair_requeue") == 1, kinds  # one requeue, by the repair

    ok(run(cluster, config, dsn, "devcluster", "fault", NODE, "--clear"))
    passes = load_config(config).policy.quarantine.resume_after_passes
    actions = [periodic(cluster, config, dsn)["action"] for _ in range(passes)]
    assert actions[-1] == "resumed", actions
    assert not node_map(cluster)[NODE].drained
