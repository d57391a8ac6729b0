"""What the simulator replays: jobs as a trace gives them, one value type for every loader."""

from __future__ import annotations

from dataclasses import dataclass

#: Job classes the wait metrics are split by.
DEBUG, SMALL, LARGE = "debug", "small", "large"


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a workload. Times are seconds from the workload's start.

    ``duration_s`` is how long it runs when it is not interrupted (the trace's run time;
    also the scheduler's estimate for backfill). ``min_runtime_s`` is its minimum-runtime
    contract (0 = QOS free, never protected); ``resumable`` jobs may be requeued after it
    and resume from their last checkpoint.
    """

    job_id: int
    team: str  # the allocation (Slurm account); one per Philly VC
    user: str
    submit_s: float
    gpus: int
    duration_s: float
    min_runtime_s: float = 3600.0
    resumable: bool = True
    gpu_type: str | None = None  # None = any type
    kind: str = SMALL  # DEBUG | SMALL | LARGE (gang of more than one node)
    #: GPU types it may run on, once admission has widened ``gpu_type`` (None: just
    #: ``gpu_type``); set by ``sim.admit``
    gpu_types: tuple[str, ...] | None = None
    mem_gb: float | None = None  # GPU memory it needs per GPU, in GB (None: not known)
    #: ``parallel=`` its submission carries in --comment, "data" or "tensor" (None: not said)
    parallel: str | None = None

    @property
    def allocated(self) -> bool:
        """QOS alloc work (a contract above 0): charged to its team and owed; else QOS
        free, unallocated work, which no one is owed."""
        return self.min_runtime_s > 0

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"job {self.job_id}: gpus must be >= 1, got {self.gpus}")
        if self.duration_s <= 0:
            raise ValueError(f"job {self.job_id}: duration must be > 0, got {self.duration_s}")
        if self.submit_s < 0:
            raise ValueError(f"job {self.job_id}: submit time must be >= 0, got {self.submit_s}")
        if self.gpu_types is not None and not self.gpu_types:
            raise ValueError(f"job {self.job_id}: gpu_types must name a type, got ()")
        if self.mem_gb is not None and self.mem_gb <= 0:
            raise ValueError(f"job {self.job_id}: mem_gb must be > 0, got {self.mem_gb}")
