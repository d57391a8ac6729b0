"""The Slurm boundary as a small Protocol: the real CLI client and the fake both satisfy it."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from slurm_ml.model import Job, JobAccounting, JobState, JobUsage, Node
from slurm_ml.slurm.priority import PriorityParts
from slurm_ml.slurm.version import SlurmVersion


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """What a test, the demo or the simulator submits; mirrors the sbatch options we use."""

    user: str
    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    name: str = "job"
    command: str = "sleep 1"
    gres: str | None = None  # --gres, e.g. "gpu:a100_80g:2"
    gpus: str | None = None  # --gpus
    nodes: int = 1
    ntasks: int | None = None
    time_limit: str | None = None  # --time, e.g. "10" or "1:00:00"
    time_min: str | None = None
    requeue: bool | None = None
    hold: bool = False
    constraint: str | None = None
    comment: str | None = None
    workdir: str | None = None


@dataclass(frozen=True, slots=True)
class ArrayRequest:
    """One sbatch job array, submitted as the calling user: ``command`` (a shell line)
    runs once per index with ``$SLURM_ARRAY_TASK_ID`` set (``slurm-ml sim sweep``)."""

    indices: tuple[int, ...]
    command: str
    partition: str | None = None
    account: str | None = None
    name: str = "array"
    time_limit: str | None = None  # --time, per task
    output: str = "/dev/null"  # --output pattern: %A the array's id, %a the index
    workdir: str | None = None


@dataclass(frozen=True, slots=True)
class JobSignal:
    """A job's own ``--signal=[B:]SIG[@TIME]``: what it asked to be told before it ends."""

    signal: str  # as scancel takes it: "USR1", or a number
    target: str  # "batch" (B:) or "steps" (Slurm's default: every step, not the shell)
    before_s: int | None = None  # @TIME; Slurm's default is 60 s


class SlurmClient(Protocol):
    def version(self) -> SlurmVersion: ...

    def submit(self, req: SubmitRequest) -> int: ...

    def submit_array(self, req: ArrayRequest) -> int:
        """The array's job id (``sbatch --array``)."""
        ...

    def array_tasks(self, job_id: int) -> dict[int, str]:
        """The tasks of array ``job_id`` slurmctld still lists: index -> state name
        (PENDING, RUNNING, COMPLETED, FAILED, ...); {} once it lists none."""
        ...

    def list_jobs(
        self,
        *,
        states: Collection[JobState] | None = None,
        job_ids: Collection[int] | None = None,
        users: Collection[str] | None = None,
    ) -> list[Job]: ...

    def list_nodes(self) -> list[Node]: ...

    def job_usage(self, start: int, end: int) -> list[JobUsage]: ...

    def job_accounting(self, job_id: int) -> JobAccounting | None:
        """The job as slurmdbd accounts it (its newest run); None when it has no record."""
        ...

    def accounted_jobs(self, start: int, end: int) -> list[JobAccounting]:
        """Every job allocation that overlapped [start, end), elapsed clipped to it."""
        ...

    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        """Replace the job's AdminComment in slurmdbd (an ended job's only copy that
        lasts); SlurmCommandError when slurmdbd changed nothing."""
        ...

    def set_site_factor(self, factors: Mapping[int, int]) -> int: ...

    def site_factors(self) -> dict[int, int]: ...

    def priority_parts(self, job_id: int) -> PriorityParts | None:
        """A pending job's priority and its factors; None when sprio does not list it
        (not pending, held, not yet eligible, unknown)."""
        ...

    def requeue(self, job_ids: Sequence[int]) -> None: ...

    def cancel(self, job_ids: Sequence[int]) -> None: ...

    def signal_job(self, job_id: int, signal: str, *, target: str = "batch") -> None:
        """``scancel --signal``: ``target`` "batch" (the batch shell), "full" (it and every
        step) or "steps"; SlurmCommandError when Slurm does not know the job or it ended."""
        ...

    def job_signal(self, job_id: int) -> JobSignal | None:
        """The ``--signal`` the job's batch script sets (its ``#SBATCH`` lines); None when it
        sets none. Neither squeue nor scontrol show it (22.05, 24.11), so only these lines
        can be read: a ``--signal`` given on the sbatch command line is not seen."""
        ...

    def release(self, job_ids: Sequence[int]) -> None: ...

    def drain_node(self, node: str, reason: str) -> None: ...

    def resume_node(self, node: str) -> None: ...

    def list_runaway_jobs(self) -> list[int]: ...

    def fix_runaway_jobs(self) -> list[int]: ...

    def default_accounts(self) -> dict[str, str]:
        """user → DefaultAccount, as slurmdbd holds them (``sacctmgr show user``)."""
        ...
