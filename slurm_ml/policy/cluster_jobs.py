"""The jobs the daemon's policies reason about, reduced to what they need.

Contracts (who may be requeued for whom) and reclamation (zombies) both look at running
and waiting jobs; these value types are that shared view, built by the daemon from what
slurmctld reports, so that the policies stay pure and never parse Slurm output.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job: its GPUs, since when, and what the contract allows doing to it."""

    job_id: int
    name: str
    account: str
    user: str
    qos: str
    gpus: int
    gpu_type: str | None  # the type it got; None when the daemon could not tell
    billing_gpus: float  # gpus x billing weight of its type
    nodes: tuple[str, ...]
    start: int  # epoch seconds of this run's start (a requeued job starts again)
    time_min_s: int | None  # protected minimum runtime (--time-min); None = unknown
    requeue: bool  # resumable (--requeue)
    batch: bool  # False = salloc/srun interactive session

    def ran_s(self, now: int) -> int:
        """Seconds this run has lasted at ``now`` (0 for a start in the future)."""
        return max(0, now - self.start)


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """A pending GPU job and where it stands in Slurm's scheduling order."""

    job_id: int
    account: str
    user: str
    qos: str
    gpus: int
    gpu_types: frozenset[str]  # GPU types it may run on; empty = any
    billing_gpus: float  # what it will be charged once it runs
    submit: int  # epoch seconds
    reason: str  # Slurm's pending reason, as squeue/scontrol print it
    order: int  # position in the scheduling order (0 = first)

    def accepts(self, gpu_type: str | None) -> bool:
        """Whether this job could run on GPUs of ``gpu_type`` (None = unknown: no)."""
        return gpu_type is not None and (not self.gpu_types or gpu_type in self.gpu_types)
