"""The site's own history as a trace: last month of slurmdbd, replayed under a candidate
policy before it is deployed (a shadow run).

It reads through the Slurm boundary's ``job_usage`` (one sacct call with
``--duplicates``), so the records are the ones the daemon charges budgets from. Each job
becomes one :class:`SimJob`: submitted when its first run was, asking for the GPUs it
was allocated (type from ``gres/gpu:TYPE``), running for the sum of its runs. What the
accounting cannot give is skipped and counted, never guessed: jobs without a GPU, jobs
submitted before the window, and jobs that never started (sacct has no allocation for
them). A job still running at the window's end runs until then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from slurm_ml.model import JobUsage
from slurm_ml.sim.traces.base import Trace, TraceError, kind_of
from slurm_ml.sim.workload import SimJob
from slurm_ml.slurm.protocol import SlurmClient

__all__ = ["UNALLOCATED_QOS", "load_slurmdb", "trace_from_usage"]

#: Work in this QOS is unallocated: no minimum runtime (slurm-ml's install creates it).
UNALLOCATED_QOS = "free"

NO_GPU = "no GPU allocated"
NO_TIME = "never ran (no run time)"
BEFORE = "submitted before the window"


@dataclass
class _Runs:
    """One job id's runs so far (a requeued job has one record per run)."""

    first: JobUsage
    submit: int
    gpus: int
    gpu_type: str | None
    seconds: int


def _gpu_type(usage: JobUsage) -> str | None:
    types = {k.removeprefix("gres/gpu:") for k, v in usage.alloc_tres.items()
             if k.startswith("gres/gpu:") and v > 0}
    return types.pop() if len(types) == 1 else None


def trace_from_usage(usage: Iterable[JobUsage], start: int, end: int, *,
                     gpus_per_node: int, source: str) -> Trace:
    """The jobs submitted in ``[start, end)`` as a trace whose clock starts at ``start``."""
    if not start < end:
        raise TraceError(f"{source}: the window must end after it starts ({start} >= {end})")
    runs: dict[int, _Runs] = {}
    skipped: dict[str, int] = {}
    seen: dict[int, str] = {}  # job id -> why it is skipped if no run of it counts
    for u in usage:
        submit = u.submit if u.submit is not None else u.start
        gpus = round(u.gpus)
        seconds = max(0, (u.end if u.end is not None else end) - (u.start or end))
        if gpus < 1 or seconds <= 0:
            seen.setdefault(u.job_id, NO_GPU if gpus < 1 else NO_TIME)
            continue
        seen[u.job_id] = ""
        have = runs.get(u.job_id)
        if have is None:
            runs[u.job_id] = _Runs(u, submit or start, gpus, _gpu_type(u), seconds)
            continue
        have.submit = min(have.submit, submit or have.submit)
        have.gpus = max(have.gpus, gpus)
        have.seconds += seconds
    jobs: list[SimJob] = []
    for job_id in sorted(seen):
        r = runs.get(job_id)
        if r is None:
            skipped[seen[job_id]] = skipped.get(seen[job_id], 0) + 1
            continue
        if r.submit < start:
            skipped[BEFORE] = skipped.get(BEFORE, 0) + 1
            continue
        job = SimJob(job_id=job_id, team=r.first.account, user=r.first.user,
                     submit_s=float(r.submit - start), gpus=r.gpus,
                     duration_s=float(r.seconds), gpu_type=r.gpu_type,
                     kind=kind_of(r.gpus, gpus_per_node))
        if r.first.qos == UNALLOCATED_QOS:
            job = replace(job, min_runtime_s=0.0)
        jobs.append(job)
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return Trace(
        jobs=tuple(jobs), source=source,
        description=f"{source}: {len(jobs)} GPU jobs submitted in [{start}, {end})",
        rows=len(seen), skipped=skipped, epoch_s=float(start))


def load_slurmdb(slurm: SlurmClient, start: int, end: int, *,
                 gpus_per_node: int) -> Trace:
    """Read the window from slurmdbd (``sacct``) and make it a trace. Jobs that never
    started are not in sacct's allocations and so not replayed: the description says
    how many jobs were read and skipped."""
    usage: Sequence[JobUsage] = slurm.job_usage(start, end)
    return trace_from_usage(usage, start, end, gpus_per_node=gpus_per_node,
                            source="slurmdbd (sacct)")
