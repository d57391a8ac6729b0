"""What one simulated run produced: per-job outcomes and per-cycle samples.

The engine fills these; ``metrics`` and ``report`` only read them, so a run can be
summarised, compared and drawn without re-running it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job's fate. Times are seconds from the workload start; ``start_s`` is the
    first start, ``end_s`` None when the run ended first (still pending or running)."""

    job_id: int
    team: str
    kind: str  # sim.workload DEBUG | SMALL | LARGE
    gpus: int
    submit_s: float
    start_s: float | None
    end_s: float | None
    run_s: float  # time actually run, all attempts
    requeues: int = 0
    lost_gpu_s: float = 0.0  # GPU-seconds of work lost to requeues (since last checkpoint)
    #: every run as (start, end, GPUs held); the last one ends at the run's end if running
    runs: tuple[tuple[float, float, int], ...] = ()
    feasible: bool = True  # False: no node of this cluster could ever run it
    allocated: bool = True  # QOS alloc; False: unallocated (QOS free) work, owed to no one

    @property
    def wait_s(self) -> float | None:
        """Queue wait until the first start (None if it never started)."""
        return None if self.start_s is None else self.start_s - self.submit_s


@dataclass(frozen=True, slots=True)
class CycleSample:
    """The cluster at one policy cycle."""

    t_s: float
    busy_gpus: Mapping[str, int]  # team -> GPUs in use
    pending_gpus: Mapping[str, int]  # team -> GPUs waiting
    free_gpus: int
    fragmented_gpus: int  # free GPUs no pending job could use (wrong shape or leaf)
    owed_gpu_h: Mapping[str, float] = field(default_factory=dict)  # team -> window owed
    delivered_gpu_h: Mapping[str, float] = field(default_factory=dict)  # team -> window delivered
    #: GPU type -> GPUs in use, and -> GPUs free (their sum is the type's size)
    busy_by_type: Mapping[str, int] = field(default_factory=dict)
    free_by_type: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SimResult:
    policy: str
    cluster_gpus: int
    start_s: float
    end_s: float
    jobs: tuple[JobOutcome, ...]
    samples: tuple[CycleSample, ...]
    team_weights: Mapping[str, float]
    wall_s: float = 0.0  # how long the simulation took to run
    preemptions: int = 0  # every requeue: the policy's contracts and Slurm's QOS preemption
    qos_preemptions: int = 0  # of which Slurm's: QOS alloc requeueing QOS free work
    node_faults: int = 0  # node faults injected (settings.faults) that took a node down
    woken_cycles: int = 0  # extra policy cycles submitd's lane wakes brought forward
    fault_requeues: int = 0  # runs a node fault ended (requeued; not in preemptions)
    fault_lost_gpu_s: float = 0.0  # GPU-seconds those runs lost (not in jobs' lost_gpu_s)
