"""A runaway job record is listed and fixed through the real sacctmgr and slurmdbd.

The record itself is synthetic setup (tests/integration/runaway.py copies a finished job's
row in the accounting database); what is under test, detection and fix, is Slurm's own.
"""

from __future__ import annotations

import pytest
from runaway import runaway_job

from slurm_ml.model import JobState
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.runner import SlurmRunner

pytestmark = pytest.mark.integration


def sacct_row(run: SlurmRunner, job_id: int) -> tuple[JobState, int | None, int | None]:
    """(state, start, end) of ``job_id`` as slurmdbd reports it (epoch seconds)."""
    timed = SlurmRunner(env={**run.env, "SLURM_TIME_FORMAT": "%s"}, timeout_s=run.timeout_s)
    out = timed(["sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State,Start,End"])
    [line] = [ln for ln in out.splitlines() if ln.strip()]
    state, start, end = line.split("|")
    return (JobState.parse(state), int(start) if start.isdigit() else None,
            int(end) if end.isdigit() else None)


def test_a_runaway_job_is_listed_then_fixed(slurm_conf: str) -> None:
    run = SlurmRunner(env={"SLURM_CONF": slurm_conf}, timeout_s=60)
    slurm = CliSlurm(run)
    with runaway_job(slurm_conf) as job:
        assert slurm.list_jobs(job_ids=[job.job_id]) == []  # slurmctld does not know it
        assert sacct_row(run, job.job_id) == (JobState.RUNNING, job.start, None)
        assert job.job_id in slurm.list_runaway_jobs()

        assert job.job_id in slurm.fix_runaway_jobs()

        assert job.job_id not in slurm.list_runaway_jobs()
        # slurmdbd ends it at the latest of its start, eligible and submit times.
        assert sacct_row(run, job.job_id) == (JobState.COMPLETED, job.start, job.start)
    assert job.job_id not in slurm.list_runaway_jobs()
