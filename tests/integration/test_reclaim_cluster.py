"""Entitlement first (issue 18), on the real dev cluster: a team with a surplus in the
window but nothing running now gets its share back.

vision's dave runs the whole cluster (40 GPUs) for 75 s while nlp's alice queues jobs
that fill it after him: the a100 nodes with jobs nobody may requeue, each v100 node with
a resumable 4-GPU job protected for a minute. Then dave queues a 4-GPU v100 job. Over
the 3-minute window vision is over-served (it ran everything while nlp waited), so the
window rules alone let it requeue nothing; with ``contracts.reclaim_entitlement`` (the
default) vision runs 0 of its entitled GPUs and nlp runs above its own, so one of
alice's v100 jobs is requeued once past its minute and dave's job starts. The real
daemon, slurmctld and slurmdbd decide all of it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_jobs import daemon_config, daemon_once, show, wait_state
from slurm_jobs import sbatch_charged as sbatch

from slurm_ml import proc
from slurm_ml.store.migrate import migrate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")
WHOLE_CLUSTER = (("a100_80g", 8), ("a100_80g", 8), ("a100_40g", 8), ("a100_40g", 8),
                 ("v100", 4), ("v100", 4))


def _config(path: Path, *, reclaim: bool) -> Path:
    """A 3-minute window in 20 s buckets, requeues at once (no checkpoint grace: that path
    has its own tests), half the cluster per window."""
    return daemon_config(
        path, fairshare={"window_hours": 0.05, "owed_bucket_s": 20, "cycle_interval_s": 3},
        contracts={"preempt_after_wait_s": 0, "preempt_cap_fraction": 0.5,
                   "requeue_grace_s": 0, "reclaim_entitlement": reclaim},
        reclaim={"fix_runaway": False})


@pytest.fixture(scope="module")
def cfgs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("reclaim")
    return {"on": _config(base / "on.yaml", reclaim=True),
            "off": _config(base / "off.yaml", reclaim=False)}


def requeues(cycle: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in cycle["actions"] if a["kind"] == "requeue"]


def budget(cfg: Path, dsn: str) -> dict[str, dict[str, Any]]:
    out = proc.run([SLURM_ML, "budget", "status", "--config", str(cfg), "--dsn", dsn,
                    "--json"], timeout_s=120)
    return {r["account"]: r for r in json.loads(out.stdout)["nodes"]
            if r["kind"] == "project"}


@pytest.fixture(scope="module")
def jobs(slurm_conf: str) -> Iterator[dict[str, int]]:
    ids: dict[str, int] = {}
    try:
        for i, (gtype, n) in enumerate(WHOLE_CLUSTER):
            ids[f"before{i}"] = sbatch("dave", "detection", f"--gres=gpu:{gtype}:{n}",
                                       "--wrap", "sleep 75")
        for i in range(len(WHOLE_CLUSTER)):
            wait_state(ids[f"before{i}"], {"RUNNING"}, timeout_s=120)
        for i, (gtype, n) in enumerate(WHOLE_CLUSTER):  # nlp's demand, while vision runs
            resumable = gtype == "v100"
            ids[f"fill{i}"] = sbatch(
                "alice", "llm-pretrain", f"--gres=gpu:{gtype}:{n}",
                "--requeue" if resumable else "--no-requeue", "--time-min=1",
                "--wrap", "sleep 900")
        for i in range(len(WHOLE_CLUSTER)):
            wait_state(ids[f"before{i}"], {"COMPLETED"}, timeout_s=180)
        for i in range(len(WHOLE_CLUSTER)):
            wait_state(ids[f"fill{i}"], {"RUNNING"}, timeout_s=120)
        ids["started"] = int(time.time())
        ids["waiting"] = sbatch("dave", "detection", "--gres=gpu:v100:4", "--wrap",
                                "sleep 900")
        assert wait_state(ids["waiting"], {"PENDING"}, timeout_s=60)["JobState"] == "PENDING"
        yield ids
    finally:
        live = [str(v) for k, v in ids.items() if k != "started"]
        proc.run(["scancel", *live], check=False)


def test_a_team_below_its_entitlement_reclaims_where_window_ratios_would_not(
        cfgs: dict[str, Path], pg_module_dsn: str, jobs: dict[str, int]) -> None:
    ran = time.time() - jobs["started"]
    if ran < 65:
        time.sleep(65 - ran)  # past alice's 1-minute protected runtime
    victims = {jobs[f"fill{i}"] for i, (t, _) in enumerate(WHOLE_CLUSTER) if t == "v100"}

    # the premise: over the window vision is not under-served (window rules: no requeue
    # for it), yet it runs nothing now and nlp runs above its entitlement
    # budget status reads the daemon's tables, and no daemon has run on this database yet
    # (an unmigrated database is one that could not be read: exit 1)
    migrate(pg_module_dsn)
    standing = budget(cfgs["on"], pg_module_dsn)
    det, pre = standing["detection"], standing["llm-pretrain"]
    assert det["ratio"] is not None and det["ratio"] >= 1, standing
    assert det["running_gpus"] == 0 and det["entitlement_first"], det
    assert pre["running_gpus"] > pre["entitled_gpus"], pre

    off = daemon_once(cfgs["off"], pg_module_dsn)  # window ratios only: nothing to do
    assert requeues(off) == [], off

    # The daemon cycles every few seconds: the requeue is the first cycle's or one of the
    # next two. The `off` cycle just pushed SiteFactors, and slurmctld shows the waiting
    # job's Reason as None until its scheduler reaches it again (1.5 s here, longer on a
    # loaded machine: a full run once had a first cycle that planned nothing); a --once
    # daemon is a new process and keeps no reason from before (daemon/reasons.py). What
    # each cycle said, and the waiting job's reason, go in the message.
    seen: list[dict[str, Any]] = []
    done: list[dict[str, Any]] = []
    for _ in range(3):
        on = daemon_once(cfgs["on"], pg_module_dsn)
        seen.append({k: on.get(k) for k in ("outcome", "message", "counts", "leader")})
        done = requeues(on)
        if done:
            break
        seen.append({"waiting": {k: show(jobs["waiting"]).get(k)
                                 for k in ("JobState", "Reason", "Priority")}})
        time.sleep(3)
    assert len(done) == 1 and done[0]["job_id"] in victims, (done, seen)
    action = done[0]
    assert str(jobs["waiting"]) in action["reason"], action
    assert "entitled billing GPUs" in action["reason"], action["reason"]
    assert int(show(action["job_id"]).get("Restarts", "0")) == 1
    wait_state(jobs["waiting"], {"RUNNING", "CONFIGURING"}, timeout_s=120)
    for i, (gtype, _) in enumerate(WHOLE_CLUSTER):
        if gtype != "v100":  # nobody may requeue these
            assert show(jobs[f"fill{i}"])["JobState"] == "RUNNING"

    why = proc.run([SLURM_ML, "why", str(action["job_id"]), "--config", str(cfgs["on"]),
                    "--dsn", pg_module_dsn, "--json"], timeout_s=120)
    last = json.loads(why.stdout)["history"][-1]
    assert last["kind"] == "requeue" and not last["dry_run"], last
    assert last["details"]["basis"] == "entitlement", last
    assert last["details"]["for_job"] == jobs["waiting"], last
    text = proc.run([SLURM_ML, "why", str(action["job_id"]), "--config", str(cfgs["on"]),
                     "--dsn", pg_module_dsn], timeout_s=120)
    assert "entitled billing GPUs" in text.stdout, text.stdout
