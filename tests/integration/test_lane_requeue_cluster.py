"""Issue 18's lane lever on the real dev cluster: with every GPU busy with allocated work
only (no free work for Slurm's preempt/qos to requeue), a researcher's debug job starts
within 60 s because the daemon requeues work past its protection for it, and
``slurm-ml why`` on the debug job says so.

nlp's alice fills all 40 GPUs with resumable jobs protected for 1 minute; vision's dave
queues an a100_80g node, so that nlp is over-served in the 3-minute window. The
contracts may requeue nothing here (their cap is floor(0.01 x 40) = 0), the lane may
requeue 10 GPUs per window. Once alice's jobs are past their minute, carol submits a
debug job (1 GPU, 10 minutes) and one real daemon cycle (``slurm-ml daemon --once``,
as root, on a database of this module's own) runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from slurm_jobs import daemon_config, daemon_once, daemon_view, show, wait_state
from slurm_jobs import sbatch_timed as sbatch

from slurm_ml import proc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")
DEBUG_START_S = 60  # the bound on a debug job's wait on a full cluster
FILL = ("a100_80g:8", "a100_80g:8", "a100_40g:8", "a100_40g:8", "v100:4", "v100:4")


def explain(cfg_path: Path) -> str:
    """Why no lane requeue: the lane, the positions, and each running job's blocker as a
    victim for the most deserving waiting job there can be (printed on a failure)."""
    from slurm_ml.daemon import views
    from slurm_ml.daemon.plan import fast_lane, ledger
    from slurm_ml.policy import contracts

    v = daemon_view(cfg_path)
    cfg, now, obs, running, pos = v.cfg, v.now, v.obs, v.running, v.positions
    lane = fast_lane(cfg, obs.jobs)
    waiting = [w for w in views.waiting_jobs(cfg, obs.jobs) if w.job_id in lane.members]
    probe = contracts.probe_job(now)
    with_probe = {**pos, probe.account: contracts.AllocationPosition(probe.account, 1.0,
                                                                     0.0, 0.0)}
    out = [f"lane members={sorted(lane.members)} held={dict(lane.held)} cap={lane.cap}",
           f"lane waiting={waiting}", f"positions={pos}"]
    out += [f"  running {r.job_id} {r.account} {r.gpu_type} protected={r.time_min_s} "
            f"ran={now - r.start} blocker="
            f"{contracts.victim_blocker(now, r, probe, positions=with_probe, ledger=ledger(()), cfg=cfg.policy.contracts)}"
            for r in running]
    return "\n".join(out)


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return daemon_config(
        tmp_path / "lane.yaml", weights={"nlp": 70, "vision": 30},
        fairshare={"window_hours": 0.05, "owed_bucket_s": 20, "cycle_interval_s": 3},
        contracts={"preempt_cap_fraction": 0.01, "requeue_grace_s": 0,
                   "preempt_after_wait_s": 0},
        fast_lane={"preempt_cap_fraction": 0.25, "preempt_after_s": 0})


def test_a_debug_job_gets_room_from_over_served_allocated_work_within_a_minute(
        cfg: Path, pg_module_dsn: str, jobs: list[int]) -> None:
    # --time=120: long work (a limit within short_job_time_limit_min would make these
    # short work, which counts against the lane's cap and is never a lane victim)
    fill = [sbatch("alice", "llm-pretrain", f"--gres=gpu:{g}", "--requeue", "--time=120",
                   "--time-min=1", "--wrap", "sleep 900", jobs=jobs)[0] for g in FILL]
    for job in fill:
        wait_state(job, {"RUNNING"}, timeout_s=120)
    started = time.time()
    waiting, _ = sbatch("dave", "detection", "--gres=gpu:a100_80g:8", "--time=30",
                        "--wrap", "sleep 900", jobs=jobs)
    wait_state(waiting, {"PENDING"}, timeout_s=30)
    time.sleep(max(0.0, 65 - (time.time() - started)))  # past alice's 1-minute protection

    debug, submitted = sbatch("carol", "llm-eval", "--gres=gpu:1", "--time=10",
                              "--time-min=10", "--wrap", "sleep 300", jobs=jobs)
    deadline = time.monotonic() + 30
    while show(debug).get("Reason") not in {"Resources", "Priority"}:
        assert time.monotonic() < deadline, show(debug)
        time.sleep(1)

    cycle = daemon_once(cfg, pg_module_dsn)
    lane = [a for a in cycle["actions"] if a["kind"] == "lane_requeue"]
    assert len(lane) == 1 and f"fast-lane job {debug} " in lane[0]["reason"], \
        f"{cycle}\n{explain(cfg)}"
    victim = lane[0]["job_id"]
    assert victim in fill
    assert not [a for a in cycle["actions"] if a["kind"] == "requeue"], cycle

    fields = wait_state(debug, {"RUNNING"}, timeout_s=DEBUG_START_S + 30)
    waited = time.time() - submitted
    assert waited <= DEBUG_START_S, f"debug job {debug} waited {waited:.0f} s: {fields}"
    assert int(show(victim).get("Restarts", "0")) == 1
    assert show(waiting)["JobState"] == "PENDING"  # it did not jump ahead

    why = proc.run([SLURM_ML, "why", str(debug), "--config", str(cfg), "--json"],
                   check=False, timeout_s=120, env={**os.environ, "SLURM_ML_DSN": pg_module_dsn})
    assert why.returncode == 0, why.stderr
    made = json.loads(why.stdout)["made_room"]
    assert [(m["kind"], m["victim"], m["dry_run"]) for m in made] == [
        ("lane_requeue", victim, False)]
    assert f"fast-lane job {debug}" in made[0]["reason"]
