"""Slurm's preemptions of free work, finished when their grace ends (pure).

With ``PreemptType=preempt/qos`` and QOS free's ``GraceTime``, slurmctld signals a
preempted job and moves its end time to the grace's end, but requeues it only when it
next looks: its time-limit sweep, every 30 s (``PERIODIC_TIMEOUT``, both 22.05 and
24.11), or a scheduling pass over the preemptor, which backfill skips while nothing
changes. So the job that preempted waits its grace plus up to 30 s more: a debug job on
a full dev cluster started 37-60 s after its submission with a 30 s grace
(``tests/fixtures/slurm/22.05/preempt_grace``). The daemon, woken at the grace's end,
requeues the job itself: what Slurm's sweep does for ``PreemptMode=REQUEUE``, sooner.

Only QOS free's jobs: slurm-ml's install gives that QOS ``PreemptMode=requeue``, so a
requeue is what Slurm would do. A site's own QOS may preempt by cancelling (or
suspending); those are left to Slurm, and so is a free job that may not be requeued
(Slurm cancels those).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from slurm_ml.model import FREE_QOS, Job, JobState

#: slurmctld's time-limit sweep period (``PERIODIC_TIMEOUT`` in slurmctld.h).
SWEEP_S = 30
#: Seconds past a grace's end a woken cycle comes (Slurm's clock is whole seconds).
WAKE_SLACK_S = 1
#: How soon after a submission slurmctld preempts for it: its main scheduler runs on the
#: submission, ``sched_min_interval`` (2 s by default) at most after the last pass
#: (measured: under a second on the dev cluster).
PREEMPT_DELAY_S = 2


def in_grace(job: Job) -> bool:
    """Whether Slurm preempted ``job`` and it still runs (in its grace, or past it)."""
    return (job.state == JobState.RUNNING and job.preempt_time is not None
            and job.end_time is not None)


def finishable(job: Job) -> bool:
    """Whether the daemon may finish ``job``'s preemption: in its grace, in QOS free
    (whose PreemptMode is requeue), and requeueable."""
    return in_grace(job) and job.qos == FREE_QOS and job.requeue


def overdue(now: int, jobs: Sequence[Job]) -> list[Job]:
    """Preempted jobs whose grace has ended and that Slurm has not requeued yet: the
    test slurmctld itself makes (``now >= end_time``), for :func:`finishable` ones."""
    return [j for j in jobs
            if finishable(j) and j.end_time is not None and now >= j.end_time]


def grace_ends(now: int, jobs: Sequence[Job]) -> list[int]:
    """When a cycle should come to finish the preemptions still in their grace."""
    return sorted({j.end_time + WAKE_SLACK_S for j in jobs
                   if finishable(j) and j.end_time is not None and j.end_time > now})


def why_overdue(job: Job, now: int) -> str:
    """The audit, notify and ``why`` line of a finished preemption: what happened, why,
    and what the job's owner can do."""
    assert job.preempt_time is not None and job.end_time is not None
    grace = job.end_time - job.preempt_time
    at = datetime.fromtimestamp(job.preempt_time, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"job {job.job_id} ran in QOS {job.qos}, which higher-priority work may "
            f"preempt: Slurm preempted it at {at} and gave it {grace} s to checkpoint "
            f"(SIGTERM to its steps). That grace ended {now - job.end_time} s ago and "
            f"Slurm requeues it only at its next time-limit sweep (every {SWEEP_S} s), so "
            f"slurm-ml requeued it now. It restarts from the queue: resume from your last "
            f"checkpoint, and write one within {grace} s of a SIGTERM.")
