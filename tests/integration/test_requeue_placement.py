"""Requeue only what makes room, on the real dev cluster (issue 16 item 3).

nlp's alice fills the four a100 nodes with jobs nobody may requeue, and each v100 node
(4 GPUs) with a resumable 2-GPU job and a pinned one. vision's dave queues a 4-GPU v100
job, which needs a whole v100 node. The real daemon runs:

1. while each v100 node keeps a pinned job, no requeue can let dave's job start, so none
   happens (before issue 16 the two resumable jobs, 2 + 2 GPUs on two nodes, were
   requeued and the job still could not start);
2. once gpu05's pinned job ends, the resumable job there is the one requeued, and dave's
   job then starts on gpu05; gpu06's resumable job keeps running.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_jobs import daemon_config, daemon_once, show, wait_state
from slurm_jobs import sbatch_charged as sbatch

from slurm_ml import proc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")


daemon = daemon_once


def requeues(cycle: dict[str, Any]) -> list[int]:
    return [a["job_id"] for a in cycle["actions"] if a["kind"] == "requeue"]


def explain(cfg_path: Path) -> str:
    """The room per node and the plan, when an assertion fails."""
    from slurm_ml.config import load_config
    from slurm_ml.daemon import views
    from slurm_ml.daemon.observe import observe
    from slurm_ml.policy import placement
    from slurm_ml.slurm.client import CliSlurm

    cfg = load_config(cfg_path)
    obs = observe(cfg, CliSlurm(), None, int(time.time()))
    running = views.running_jobs(cfg, obs.jobs)
    slots = placement.node_slots(placement.cluster_nodes(cfg, obs.nodes), running)
    lines = [f"{n}: free={s.free} held={s.held} usable={s.spec.usable}"
             for n, s in sorted(slots.items())]
    lines += [f"waiting {w}" for w in views.waiting_jobs(cfg, obs.jobs)]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def cfg_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-minute window in 20 s buckets (only this test's jobs count); requeues at once,
    up to half the cluster per window, with no checkpoint grace (tested elsewhere)."""
    return daemon_config(
        tmp_path_factory.mktemp("placement") / "slurm-ml.yaml",
        weights={"nlp": 70, "vision": 30},
        fairshare={"window_hours": 0.05, "owed_bucket_s": 20, "cycle_interval_s": 3},
        contracts={"preempt_after_wait_s": 0, "preempt_cap_fraction": 0.5,
                   "requeue_grace_s": 0},
        reclaim={"fix_runaway": False})


@pytest.fixture(scope="module")
def jobs(slurm_conf: str) -> Iterator[dict[str, int]]:
    ids: dict[str, int] = {}
    try:
        for i, gtype in enumerate(("a100_80g", "a100_80g", "a100_40g", "a100_40g")):
            ids[f"fill{i}"] = sbatch("alice", "llm-pretrain", f"--gres=gpu:{gtype}:8",
                                     "--no-requeue", "--wrap", "sleep 900")
        for node in ("gpu05", "gpu06"):
            ids[f"resumable_{node}"] = sbatch(
                "alice", "llm-pretrain", "--gres=gpu:v100:2", "--requeue", "--time-min=1",
                f"--nodelist={node}", "--wrap", "sleep 900")
            ids[f"pinned_{node}"] = sbatch(
                "alice", "llm-pretrain", "--gres=gpu:v100:2", "--no-requeue", "--time-min=1",
                f"--nodelist={node}", "--wrap", "sleep 900")
        for job in list(ids.values()):
            wait_state(job, {"RUNNING"}, timeout_s=120)
        ids["started"] = int(time.time())
        ids["starved"] = sbatch("dave", "detection", "--gres=gpu:v100:4", "--wrap",
                                "sleep 900")
        # vision's demand beyond it: nlp is clearly over-served (as in
        # test_reconciler_cluster); no a100 job may be requeued for it
        ids["big"] = sbatch("dave", "detection", "--gres=gpu:a100_80g:8", "--wrap",
                            "sleep 900")
        for key in ("starved", "big"):
            assert wait_state(ids[key], {"PENDING"}, timeout_s=60)["JobState"] == "PENDING"
        yield ids
    finally:
        live = [str(v) for k, v in ids.items() if k != "started"]
        if live:
            proc.run(["scancel", *live], check=False)


def test_a_requeue_happens_only_when_it_lets_the_starved_job_start(
        cfg_path: Path, pg_module_dsn: str, jobs: dict[str, int]) -> None:
    ran = time.time() - jobs["started"]
    if ran < 70:
        time.sleep(70 - ran)  # past the 1-minute minimum runtime, a few owed buckets

    first = daemon(cfg_path, pg_module_dsn)

    assert first["outcome"] == "acted", first
    assert requeues(first) == [], f"{first}\n{explain(cfg_path)}"
    for node in ("gpu05", "gpu06"):
        assert int(show(jobs[f"resumable_{node}"]).get("Restarts", "0")) == 0
    assert show(jobs["starved"])["JobState"] == "PENDING"

    proc.run(["scancel", str(jobs["pinned_gpu05"])])
    deadline = time.monotonic() + 60
    while show(jobs["pinned_gpu05"])["JobState"] in {"RUNNING", "COMPLETING"}:
        assert time.monotonic() < deadline, show(jobs["pinned_gpu05"])
        time.sleep(1)
    time.sleep(5)  # slurmctld frees the node's GPUs; dave's job still cannot start
    assert show(jobs["starved"])["JobState"] == "PENDING"

    second = daemon(cfg_path, pg_module_dsn)

    assert requeues(second) == [jobs["resumable_gpu05"]], f"{second}\n{explain(cfg_path)}"
    action = next(a for a in second["actions"] if a["kind"] == "requeue")
    assert str(jobs["starved"]) in action["reason"]
    started = wait_state(jobs["starved"], {"RUNNING", "CONFIGURING"}, timeout_s=120)
    assert started["NodeList"] == "gpu05", started
    assert show(jobs["resumable_gpu06"])["JobState"] == "RUNNING"
    assert int(show(jobs["resumable_gpu06"]).get("Restarts", "0")) == 0
