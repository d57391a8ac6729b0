"""The simulator's state, and the value types the policies take, built from it.

The daemon turns what slurmctld and slurmdbd report into ``Footprint``, ``PendingJob``,
``RunningJob`` and ``WaitingJob`` (``daemon.views``); the simulator builds the same values
from its own jobs, once per state change (a footprint when a job arrives, starts, ends or
is requeued), so that a policy cycle costs what the policy costs and not a rebuild.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TypeVar

from slurm_ml.config import Config
from slurm_ml.model import ALLOC_QOS, FREE_QOS
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import PreemptionLedger
from slurm_ml.policy.fairshare import Footprint, FootprintLedger, PendingJob, is_short_job
from slurm_ml.policy.fairshare.tree import FlatTree, flatten
from slurm_ml.policy.placement import NodeSlot, NodeSpec, held_per_node
from slurm_ml.sim.cluster import Alloc, Cluster
from slurm_ml.sim.workload import SimJob

#: A task's states. ARRIVING: not submitted yet; NEVER: can never run on this cluster.
ARRIVING, PENDING, RUNNING, DONE, NEVER = range(5)

_K = TypeVar("_K")

#: A policy's sort key for the pending queue: smaller runs first.
Key = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Knobs of the simulation itself (the policy's own knobs are the Config's)."""

    cycle_s: float = 300.0  # policy cycle: SiteFactor, requeues, Slurm's priority recalculation
    checkpoint_s: float = 1800.0  # a requeued job resumes from its last checkpoint
    half_life_s: float = 7 * 86400.0  # slurm-fairshare: PriorityDecayHalfLife (Slurm: 7 days)
    max_age_s: float = 7 * 86400.0  # slurm-fairshare: PriorityMaxAge (Slurm: 7 days)
    weight_fairshare: int = 10_000  # slurm-fairshare: PriorityWeightFairshare
    weight_age: int = 1_000  # slurm-fairshare: PriorityWeightAge
    #: owed/delivered sampled once per this much simulated time (and at most every cycle),
    #: whatever the policy and the cycle: a sample costs a whole fair share
    owed_every_s: float = 3600.0
    end_s: float | None = None  # stop here; None: when every job has run
    #: node faults as (at_s, node name, repair_s): the node's jobs are requeued from their
    #: last checkpoint and the node takes no work until repaired (``sim.faults``)
    faults: tuple[tuple[float, str, float], ...] = ()
    epoch_s: int = 1_600_000_000  # simulated second 0 as the policies' epoch clock
    #: QOS free's GraceTime: a free job Slurm preempts runs on this long (its checkpoint
    #: time) before it is requeued, and its preemptor waits for it; 0: at once. The
    #: engine's default is 0; ``prepare`` (``slurm-ml sim``) sets the config's
    #: ``policy.contracts.free_grace_s``, which ``slurm-ml install`` renders
    free_grace_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.cycle_s > 0 and self.checkpoint_s > 0 and self.half_life_s > 0
                and self.max_age_s > 0 and self.owed_every_s > 0 and self.free_grace_s >= 0):
            raise ValueError(f"bad simulation settings: {self}")


@dataclass(slots=True, eq=False)
class Task:
    """One job's life in the simulation (mutable; the engine owns it)."""

    spec: SimJob
    types: tuple[int, ...]  # GPU type indices it may run on
    qos: str
    billing_pending: float  # billing GPUs while pending (untyped: the top weight)
    pending_job: PendingJob
    state: int = ARRIVING
    remaining: float = 0.0  # seconds of work left when the current/next run starts
    pend_since: float = 0.0
    run_start: float = 0.0
    run_no: int = 0  # runs started so far (an end event of an older run is stale)
    alloc: Alloc = ()
    held: int = 0  # GPUs held while running (whole nodes for a gang)
    end_at: float = math.inf
    key: Key = ()
    footprint: Footprint | None = None  # the open one (pending or running)
    running_job: RunningJob | None = None
    first_start: float | None = None
    end: float | None = None
    run_s: float = 0.0
    requeues: int = 0
    lost_gpu_s: float = 0.0
    #: every finished or halted run as (start, end, GPUs held): the job record's history
    runs: list[tuple[float, float, int]] = field(default_factory=list)
    #: the last ``waiting_jobs`` value built for it, as (order, pend_since, value)
    waiting: tuple[int, float, WaitingJob] | None = None
    #: a running free job Slurm has preempted: when its GraceTime ends and it is requeued
    grace_end: float | None = None
    #: a pending alloc job whose victims are in their grace: it preempts no more until then
    awaits_victims: float = -math.inf

    @property
    def assoc(self) -> tuple[str, str]:
        return self.spec.team, self.spec.user


@dataclass(slots=True)
class SimState:
    """Everything the engine and the policies share: the clock, the queue, the cluster."""

    cfg: Config
    settings: SimSettings
    cluster: Cluster
    tree: FlatTree
    tasks: list[Task]
    by_id: dict[int, Task]
    capacity: float  # billing GPUs (fairshare.capacity_billing_gpus, computed once)
    now: float = 0.0
    pending: list[Task] = field(default_factory=list)  # sorted by Task.key
    running: dict[int, Task] = field(default_factory=dict)  # job id -> task, in start order
    #: counts the starts and stops: a policy's view of ``running`` is as old as its count
    running_changes: int = 0
    ends: list[tuple[float, int]] = field(default_factory=list)  # (end_at, job id), sorted
    ledger: FootprintLedger = field(default_factory=FootprintLedger)
    last_requeue: dict[int, int] = field(default_factory=dict)  # job id -> epoch
    recent_requeues: list[tuple[int, int]] = field(default_factory=list)  # (epoch, GPUs)
    lane_requeues: list[tuple[int, int]] = field(default_factory=list)  # the lane's own
    #: when submitd's lane wakes ask for a cycle (``policy.lane_requeue.wake_for``), a heap
    wakes: list[float] = field(default_factory=list)
    pending_assocs: dict[tuple[str, str], int] = field(default_factory=dict)  # -> jobs
    pending_alloc: int = 0  # pending QOS alloc jobs (those that may preempt free work)
    #: the pending QOS alloc jobs as (remaining run time, job id), sorted: the scheduler's
    #: index of the jobs short enough to backfill before a reservation (``sched``)
    alloc_by_remaining: list[tuple[float, int]] = field(default_factory=list)
    by_remaining: list[tuple[float, int]] = field(default_factory=list)  # ... of every job
    #: the pending QOS alloc jobs in key order (``pending``'s subset), kept only while no
    #: policy cycle has re-keyed the queue (None from then on: rebuilding it would cost a
    #: walk of the queue per cycle): the scheduler goes past free work by it
    alloc_queue: list[Task] | None = field(default_factory=list)
    #: team -> its pending QOS alloc jobs, job id -> task (those the contracts may serve)
    alloc_of: dict[str, dict[int, Task]] = field(default_factory=dict)
    #: (account, user, nice, short) -> its pending jobs, job id -> task: the jobs to which
    #: ``site_factors`` gives one value, so that a cycle asks it once per class
    classes: dict[tuple[str, str, int, bool], dict[int, Task]] = field(default_factory=dict)
    #: jobs queued (arrived or requeued) since the engine's last policy cycle
    fresh: list[Task] = field(default_factory=list)
    #: (GPUs, types) -> pending jobs of that shape
    pending_shapes: dict[tuple[int, tuple[int, ...]], int] = field(default_factory=dict)
    busy: dict[str, int] = field(default_factory=dict)  # team -> GPUs held
    waiting: dict[str, int] = field(default_factory=dict)  # team -> GPUs pending
    #: billing GPU-seconds run per association, as (total up to ``at``, rate, at)
    usage: dict[tuple[str, str], tuple[float, float, float]] = field(default_factory=dict)
    preemptions: int = 0  # every requeue: the contracts' and Slurm's QOS preemptions
    qos_preemptions: int = 0  # of which Slurm's: QOS alloc preempting QOS free
    fault_requeues: int = 0  # runs ended by a node fault (not counted as preemptions)
    fault_lost_gpu_s: float = 0.0  # work those runs lost since their last checkpoint
    #: node index -> GPUs taken out of service while it is repaired
    down: dict[int, int] = field(default_factory=dict)
    free_running: int = 0  # running QOS free jobs (what an alloc job may preempt)
    #: the running QOS free jobs, job id -> task, in start order (``running``'s subset)
    free_tasks: dict[int, Task] = field(default_factory=dict)
    #: per node index, the running QOS alloc jobs on it, job id -> GPUs held there
    #: (``placement.held_per_node``), in start order: the contracts' room, kept as jobs
    #: start and stop (``room.placement_nodes_now``); ``room_dirty``: changed since read
    held_on: dict[int, dict[int, int]] = field(default_factory=dict)
    room_dirty: set[int] = field(default_factory=set)
    room_slots: dict[str, NodeSlot] = field(default_factory=dict)  # as of the last read
    #: every node as the planner sees it, by node index: built on first use, never changed
    room_specs: list[NodeSpec] = field(default_factory=list)

    def stamp(self, t: float) -> int:
        """Simulated seconds as the policies' epoch seconds."""
        return self.settings.epoch_s + math.floor(t)

    # ------------------------------------------------------------------ bookkeeping

    def add_pending(self, task: Task) -> None:
        insort(self.pending, task, key=task_key)
        job_id = task.spec.job_id
        insort(self.by_remaining, (task.remaining, job_id))
        if task.qos == ALLOC_QOS:
            self.pending_alloc += 1
            insort(self.alloc_by_remaining, (task.remaining, job_id))
            if self.alloc_queue is not None:
                insort(self.alloc_queue, task, key=task_key)
            self.alloc_of.setdefault(task.spec.team, {})[job_id] = task
        self.classes.setdefault(job_class(task), {})[job_id] = task
        self.fresh.append(task)
        a = task.assoc
        self.pending_assocs[a] = self.pending_assocs.get(a, 0) + 1
        shape = (task.spec.gpus, task.types)
        self.pending_shapes[shape] = self.pending_shapes.get(shape, 0) + 1
        team = task.spec.team
        self.waiting[team] = self.waiting.get(team, 0) + task.spec.gpus

    def left_pending(self, task: Task) -> None:
        """Counters and indexes only: the caller takes the task out of ``pending``."""
        job_id = task.spec.job_id
        del self.by_remaining[bisect_left(self.by_remaining, (task.remaining, job_id))]
        if task.qos == ALLOC_QOS:
            self.pending_alloc -= 1
            index = self.alloc_by_remaining
            del index[bisect_left(index, (task.remaining, job_id))]
            queue = self.alloc_queue
            if queue is not None:  # its key has not changed since it joined
                del queue[bisect_left(queue, task.key, key=task_key)]
            _drop(self.alloc_of, task.spec.team, job_id)
        _drop(self.classes, job_class(task), job_id)
        a = task.assoc
        left = self.pending_assocs[a] - 1
        if left:
            self.pending_assocs[a] = left
        else:
            del self.pending_assocs[a]
        shape = (task.spec.gpus, task.types)
        left = self.pending_shapes[shape] - 1
        if left:
            self.pending_shapes[shape] = left
        else:
            del self.pending_shapes[shape]
        team = task.spec.team
        self.waiting[team] -= task.spec.gpus

    def add_running(self, task: Task) -> None:
        self.running[task.spec.job_id] = task
        self.running_changes += 1
        insort(self.ends, (task.end_at, task.spec.job_id))
        team = task.spec.team
        self.busy[team] = self.busy.get(team, 0) + task.held
        rj = task.running_job
        assert rj is not None
        if task.qos == FREE_QOS:
            self.free_running += 1
            self.free_tasks[task.spec.job_id] = task
        elif (per := held_per_node(rj)) > 0:
            for n, _ in task.alloc:
                self.held_on.setdefault(n, {})[task.spec.job_id] = per
                self.room_dirty.add(n)
        self.accrue(task.assoc, rj.billing_gpus)

    def left_running(self, task: Task) -> None:
        del self.running[task.spec.job_id]
        self.running_changes += 1
        i = bisect_left(self.ends, (task.end_at, task.spec.job_id))
        del self.ends[i]
        self.busy[task.spec.team] -= task.held
        if task.qos == FREE_QOS:
            self.free_running -= 1
            del self.free_tasks[task.spec.job_id]
        else:
            for n, _ in task.alloc:
                held = self.held_on.get(n)
                if held is not None and held.pop(task.spec.job_id, None) is not None:
                    self.room_dirty.add(n)
        assert task.running_job is not None
        self.accrue(task.assoc, -task.running_job.billing_gpus)

    def moved_end(self, task: Task, end_at: float) -> None:
        """A running task now ends at ``end_at`` (a preempted free job's grace end)."""
        job_id = task.spec.job_id
        del self.ends[bisect_left(self.ends, (task.end_at, job_id))]
        task.end_at = end_at
        insort(self.ends, (end_at, job_id))

    def accrue(self, assoc: tuple[str, str], rate_delta: float) -> None:
        total, rate, at = self.usage.get(assoc, (0.0, 0.0, self.now))
        self.usage[assoc] = (total + rate * (self.now - at), rate + rate_delta, self.now)

    def used(self, assoc: tuple[str, str], t: float) -> float:
        """Billing GPU-seconds the association has run up to ``t`` (>= the last change)."""
        total, rate, at = self.usage.get(assoc, (0.0, 0.0, t))
        return total + rate * (t - at)

    def preemption_ledger(self) -> PreemptionLedger:
        return PreemptionLedger(last_requeue=dict(self.last_requeue),
                                recent=list(self.recent_requeues),
                                lane_recent=list(self.lane_requeues))


#: The order of ``SimState.pending`` (to sort it, insert into it, bisect it); in C, since
#: the scheduling pass sorts and bisects by it often enough for a call to count.
task_key: Callable[[Task], Key] = attrgetter("key")


def job_class(task: Task) -> tuple[str, str, int, bool]:
    """What ``site_factors`` reads of a pending job besides its id."""
    pj = task.pending_job
    return pj.account, pj.user, pj.nice, pj.short


def _drop(groups: dict[_K, dict[int, Task]], group: _K, job_id: int) -> None:
    members = groups[group]
    del members[job_id]
    if not members:
        del groups[group]


# ---------------------------------------------------------------------- value builders


def billing_weight(cfg: Config, gpu_type: str | None) -> float:
    """A type's weight; an untyped pending job is billed at the top weight (as the daemon
    bills a pending job that accepts any type: ``views.job_billing_gpus``)."""
    if gpu_type is not None:
        got = cfg.gpu_types.get(gpu_type)
        return got.billing_weight if got is not None else 1.0
    return max((t.billing_weight for t in cfg.gpu_types.values()), default=1.0)


def new_task(cfg: Config, cluster: Cluster, job: SimJob) -> Task:
    qos = ALLOC_QOS if job.allocated else FREE_QOS
    types = (cluster.types_for(job.gpu_type) if job.gpu_types is None
             else cluster.types_among(job.gpu_types))
    return Task(spec=job, types=types, qos=qos,
                billing_pending=job.gpus * billing_weight(cfg, job.gpu_type),
                pending_job=PendingJob(
                    job_id=job.job_id, account=job.team, user=job.user, qos=qos, nice=0,
                    short=is_short_job(job.min_runtime_s / 60, job.duration_s / 60,
                                       cfg.policy.fairshare)),
                remaining=job.duration_s, pend_since=job.submit_s)


def pending_footprint(st: SimState, task: Task) -> Footprint:
    job = task.spec
    return Footprint(job_id=job.job_id, account=job.team, user=job.user,
                     billing_gpus=task.billing_pending, allocated=task.qos == ALLOC_QOS,
                     pending_from=st.stamp(task.pend_since), run_from=None, until=None)


def running_job(st: SimState, task: Task) -> RunningJob:
    job = task.spec
    names = tuple(st.cluster.names[n] for n, _ in task.alloc)
    gpu_type = st.cluster.type_names[st.cluster.type_of[task.alloc[0][0]]]
    return RunningJob(
        job_id=job.job_id, name=f"job{job.job_id}", account=job.team, user=job.user,
        qos=task.qos, gpus=job.gpus, gpu_type=gpu_type,
        billing_gpus=job.gpus * billing_weight(st.cfg, gpu_type), nodes=names,
        start=st.stamp(task.run_start), time_min_s=int(job.min_runtime_s),
        requeue=job.resumable, batch=True)


def running_footprint(st: SimState, task: Task, until: float | None = None) -> Footprint:
    job = task.spec
    assert task.running_job is not None
    return Footprint(job_id=job.job_id, account=job.team, user=job.user,
                     billing_gpus=task.running_job.billing_gpus,
                     allocated=task.qos == ALLOC_QOS, pending_from=st.stamp(task.pend_since),
                     run_from=st.stamp(task.run_start),
                     until=None if until is None else st.stamp(until))


def waiting_jobs(st: SimState) -> list[WaitingJob]:
    """The pending queue as the contracts see it, in scheduling order."""
    return [waiting_job(st, task, order) for order, task in enumerate(st.pending)]


def waiting_job(st: SimState, task: Task, order: int) -> WaitingJob:
    """The pending ``task`` as a waiting job at place ``order``. A job whose place and
    pending start are those of the last call gets the same value back: under overload
    the queue is long and most of it does not move between cycles."""
    got = task.waiting
    if got is not None and got[1] == task.pend_since:
        if got[0] == order:
            return got[2]
        value = at_place(got[2], order)  # moved: the same job at another place
    else:
        job = task.spec
        value = WaitingJob(
            job_id=job.job_id, account=job.team, user=job.user, qos=task.qos,
            gpus=job.gpus,
            gpu_types=(frozenset(job.gpu_types) if job.gpu_types is not None else
                       frozenset() if job.gpu_type is None else frozenset({job.gpu_type})),
            billing_gpus=task.billing_pending, submit=st.stamp(task.pend_since),
            reason="Resources", order=order)
    task.waiting = (order, task.pend_since, value)
    return value


def at_place(w: WaitingJob, order: int) -> WaitingJob:
    """``w`` at another place in the queue (the constructor: ``replace`` costs more)."""
    return WaitingJob(w.job_id, w.account, w.user, w.qos, w.gpus, w.gpu_types,
                      w.billing_gpus, w.submit, w.reason, order)


def free_gpus(st: SimState) -> dict[str, int]:
    """Idle GPUs per type (every simulated node is up)."""
    c = st.cluster
    return {name: c.free_by_type[i] for i, name in enumerate(c.type_names) if c.type_total[i]}


def team_weights(cfg: Config) -> dict[str, float]:
    """Each project's budget share of the cluster (the fraction it is owed when all ask)."""
    tree = flatten(cfg.budgets)
    return {tree.accounts[n]: tree.budget_shares[n] for n, kind in enumerate(tree.kinds)
            if kind == "project"}
