"""Core value types shared by every part of slurm-ml.

They are frozen dataclasses so that policy code can pass them around freely
and compare them by value. No I/O, no clock: that belongs at the edges.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from slurm_ml.gres import slurm_gpu_total

#: The two QOS of allocated vs unallocated work (docs/design.md): charged and protected for
#: the job's --time-min, or uncharged and preemptible by requeue.
ALLOC_QOS = "alloc"
FREE_QOS = "free"


@dataclass(frozen=True, slots=True)
class GpuType:
    """One GPU model as the cluster names it (the GRES type, e.g. ``a100_80g``)."""

    name: str
    memory_gb: float
    nvlink_links: int
    compute_capability: str
    billing_weight: float
    feature: str


@dataclass(frozen=True, slots=True)
class NodeClass:
    """A group of identical nodes: same GPU type and count, same leaf switch."""

    name: str
    nodes: str  # a ClusterShell NodeSet expression, e.g. "gpu[01-02]"
    gpu_type: str
    gpus_per_node: int
    leaf_switch: str
    features: tuple[str, ...]
    cpus: int
    memory_mb: int


@dataclass(frozen=True, slots=True)
class BudgetProject:
    name: str
    weight: float
    users: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BudgetProgram:
    name: str
    weight: float
    projects: tuple[BudgetProject, ...]


@dataclass(frozen=True, slots=True)
class BudgetTree:
    """org -> program -> project -> users; weights are GPU-time budgets."""

    org: str
    programs: tuple[BudgetProgram, ...]

    def accounts(self) -> list[tuple[str, str | None]]:
        """Every Slurm account as (name, parent), parents first."""
        out: list[tuple[str, str | None]] = [(self.org, None)]
        for prog in self.programs:
            out.append((prog.name, self.org))
            out.extend((proj.name, prog.name) for proj in prog.projects)
        return out

    def user_accounts(self) -> dict[str, list[str]]:
        """Each user and the project accounts they belong to, in config order."""
        out: dict[str, list[str]] = {}
        for prog in self.programs:
            for proj in prog.projects:
                for user in proj.users:
                    out.setdefault(user, []).append(proj.name)
        return out


class JobState(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    OTHER = "OTHER"

    @classmethod
    def parse(cls, text: str) -> JobState:
        head = text.split(maxsplit=1)[0].upper() if text.strip() else ""
        try:
            return cls(head)
        except ValueError:
            return cls.OTHER


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """A GPU request normalised from any of tres_per_{node,job,task,socket}.

    ``per`` says which scope ``count`` is counted in; ``gpu_type`` is None when
    the request is untyped.
    """

    count: int
    per: str  # "node" | "job" | "task" | "socket"
    gpu_type: str | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """A job as slurmctld reports it, normalised across Slurm versions."""

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: JobState
    reason: str
    nodes: str
    num_nodes: int
    gpus: tuple[GpuRequest, ...]
    time_limit_min: int | None
    time_min_min: int | None
    requeue: bool
    site_factor: int | None
    priority: int | None
    submit_time: int | None
    start_time: int | None
    features: str = ""
    comment: str = ""
    admin_comment: str = ""
    nice: int = 0  # the user's --nice (a pending job's, from sprio where JSON lacks it)
    end_time: int | None = None  # when it ended (or will, at its time limit)
    batch: bool = True  # False for salloc/srun sessions (interactive)
    num_tasks: int | None = None  # -n as slurmctld resolved it; None when it did not say
    sockets_per_node: int | None = None  # --sockets-per-node; None when unset
    #: GPUs in the allocation (AllocTRES ``gres/gpu``) once the job has one; None before
    #: it starts or where the cluster does not account gres/gpu.
    alloc_gpus: int | None = None
    #: When Slurm preempted it (its grace runs until ``end_time``); None: not preempted.
    preempt_time: int | None = None

    @property
    def total_gpus(self) -> int:
        """GPUs the job holds (its allocation, once it has one) or asks for.

        Billing, free GPUs, victim sizes, demand and zombie coverage all count with this,
        so a ``--gpus-per-task=1 -n2`` job is 2 GPUs, not 1.
        """
        if self.alloc_gpus is not None:
            return self.alloc_gpus
        return self.requested_gpus

    @property
    def requested_gpus(self) -> int:
        """GPUs the request adds up to, counted as Slurm counts them.

        Per GRES record (one GPU type, or untyped), the first scope that is set decides,
        as in :meth:`slurm_ml.policy.admission.request.JobRequest.total_gpus`: per job as is, else
        per node x nodes, else per socket x sockets per node x nodes, else per task x
        tasks. Unknown tasks count one per node and unknown sockets one per node (Slurm
        refuses ``--gpus-per-socket`` without ``--sockets-per-node``): a lower bound.
        """
        nodes = max(1, self.num_nodes)
        total = slurm_gpu_total(((g.gpu_type, g.per, g.count) for g in self.gpus),
                                nodes=nodes, tasks=max(1, self.num_tasks or nodes),
                                sockets_per_node=max(1, self.sockets_per_node or 1))
        return total or 0  # never None: the sockets are given


@dataclass(frozen=True, slots=True)
class Node:
    """A node as slurmctld reports it."""

    name: str
    state: str  # base state, e.g. IDLE, MIXED, ALLOCATED, DOWN
    flags: frozenset[str]  # DRAIN, COMPLETING, NOT_RESPONDING, ...
    reason: str
    features: tuple[str, ...]
    gres: str
    gpus_total: int
    gpu_type: str | None
    cpus: int
    real_memory_mb: int

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.state in {"DRAINED", "DRAINING"}


@dataclass(frozen=True, slots=True)
class JobUsage:
    """One accounted job clipped to a window: what it allocated and for how long."""

    job_id: int
    user: str
    account: str
    qos: str
    state: JobState
    elapsed_s: int  # seconds inside the window (sacct --truncate)
    alloc_tres: dict[str, float] = field(default_factory=dict)
    start: int | None = None
    end: int | None = None
    submit: int | None = None
    nodes: str = ""  # sacct NodeList (a host list); "" where the read did not ask for it

    @property
    def gpus(self) -> float:
        return self.alloc_tres.get("gres/gpu", 0.0)

    def gpu_hours(self) -> float:
        return self.gpus * self.elapsed_s / 3600.0


@functools.lru_cache(maxsize=65536)
def expand_hosts(nodes: str) -> tuple[str, ...]:
    """A Slurm host list (``gpu[01-03],cpu1``) as node names, by ClusterShell's NodeSet;
    empty for "", "(null)" or a list it cannot read. Cached: a cycle sees the same few
    host lists many times, and most are one node."""
    if not nodes or nodes.startswith("("):
        return ()
    if "[" not in nodes and "," not in nodes:
        return (nodes,)
    try:
        return tuple(str(n) for n in NodeSet(nodes, resolver=RESOLVER_NOGROUP))
    except NodeSetException:
        return ()


@dataclass(frozen=True, slots=True)
class JobAccounting:
    """One job as slurmdbd accounts it (``sacct``): what ``jobstats`` and ``efficiency``
    read for jobs that slurmctld may have forgotten."""

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: JobState
    elapsed_s: int  # inside the window asked for, where one was (sacct --truncate)
    alloc_cpus: int
    alloc_gpus: int
    nodes: str  # a host list
    start: int | None
    end: int | None
    admin_comment: str = ""
    #: CPU seconds of every step; None where Slurm gathered none (see ``slurm.accounting``)
    total_cpu_s: float | None = None
    req_mem_mb: int | None = None  # per node, as ReqMem says
    max_rss_mb: int | None = None  # the largest MaxRSS of any step; None: not gathered
    gpu_type: str | None = None  # the GPU type of the allocation, where AllocTRES names one
