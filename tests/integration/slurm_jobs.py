"""Reading a job's state back from the real slurmctld, shared by the integration modules."""

from __future__ import annotations

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
