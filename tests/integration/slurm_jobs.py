"""Submitting jobs as a researcher and reading their state back from the real slurmctld,
shared by the integration modules."""

from __future__ import annotations

import os
import time

from slurm_ml import proc
from slurm_ml.slurm.parse import parse_oneliner


def show(job_id: int) -> dict[str, str]:
    """``scontrol -o show job``, as a field dict."""
    out = proc.run(["scontrol", "-o", "show", "job", str(job_id)]).stdout
    return parse_oneliner(out.strip().splitlines()[0])


def wait_state(job_id: int, states: set[str], timeout_s: float = 90) -> dict[str, str]:
    """Poll until the job is in one of ``states``; AssertionError with its fields if not."""
    deadline = time.monotonic() + timeout_s
    while True:
        fields = show(job_id)
        if fields["JobState"] in states:
            return fields
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {fields['JobState']}: {fields}")
        time.sleep(1)


def sbatch(user: str, *args: str, jobs: list[int]) -> int:
    """``sbatch ARGS`` as ``user`` (output discarded); the id is appended to ``jobs``."""
    workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    res = proc.run(["runuser", "-u", user, "--", "sbatch", "--parsable", f"--chdir={workdir}",
                    "--output=/dev/null", *args], check=False, timeout_s=30)
    assert res.returncode == 0, res.stderr
    jobs.append(int(res.stdout.strip().split(";")[0]))
    return jobs[-1]
