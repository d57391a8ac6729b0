"""A shadow run of the site's own history (issue 17 item 7) on the real dev cluster.

alice runs two GPU jobs, one of them requeued once; once slurmdbd has their ends,
``slurm-ml sim --trace slurmdb?start=T`` reads them back through sacct and replays them
under a policy. The trace has each job once, with the GPUs it held, and the CLI's run
simulates them.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from slurm_jobs import sbatch, wait_state

from slurm_ml import proc
from slurm_ml.sim import traces
from slurm_ml.slurm.client import CliSlurm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _accounted(job_ids: list[int], t0: int, timeout_s: float = 60) -> None:
    """Wait until slurmdbd has every job's end (it records them a little after)."""
    deadline = time.monotonic() + timeout_s
    while True:
        usage = CliSlurm().job_usage(t0, int(time.time()) + 1)
        ended = {u.job_id for u in usage if u.end is not None and u.state.value != "REQUEUED"}
        if set(job_ids) <= ended:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"slurmdbd has not recorded the ends of {job_ids}: {usage}")
        time.sleep(2)


def test_the_clusters_own_history_replays_as_a_trace(slurm_conf: str) -> None:
    t0 = int(time.time()) - 1
    jobs: list[int] = []
    two = sbatch("alice", "--gpus=2", "--time=5", "--wrap", "sleep 3", jobs=jobs)
    again = sbatch("alice", "--gpus=1", "--time=5", "--requeue", "--wrap", "sleep 20",
                   jobs=jobs)
    try:
        wait_state(again, {"RUNNING"})
        time.sleep(3)
        proc.run(["scontrol", "requeue", str(again)])
        wait_state(two, {"COMPLETED"})
        wait_state(again, {"COMPLETED"}, timeout_s=240)  # restart delay, then 20 s
        _accounted(jobs, t0)
    finally:
        proc.run(["scancel", *map(str, jobs)], check=False)

    trace = traces.load_trace(f"slurmdb?start={t0}", slurm=CliSlurm())
    mine = {j.job_id: j for j in trace.jobs if j.job_id in jobs}
    assert set(mine) == {two, again}, trace
    assert (mine[two].gpus, mine[again].gpus) == (2, 1)
    assert mine[two].user == "alice" and mine[two].duration_s >= 3
    assert mine[again].duration_s >= 20 + 3  # both runs: the requeued one and the rerun
    assert mine[again].submit_s < mine[again].duration_s + 60

    res = proc.run([sys.executable, "-m", "slurm_ml.cli", "sim", "--trace",
                    f"slurmdb?start={t0}", "--gpus", "8", "--policy", "fifo", "--json"],
                   check=False, timeout_s=120, env={**os.environ})
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["scenario"]["jobs"] == len(trace.jobs) >= 2
    assert data["scenario"]["source"] == "slurmdbd (sacct)"
