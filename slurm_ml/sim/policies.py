"""The policies compared: each orders the pending queue; ``budget`` also requeues.

All of them run on the same engine and the same backfill; they differ only in the
order they give the queue (and, for ``budget``, in the requeues of the contracts):

- ``fifo``: submit time.
- ``slurm-fairshare``: Slurm's multifactor priority with Fair Tree: usage decayed with a
  half-life, fairshare factor = Fair Tree rank / number of associations (weighted
  large) plus the age factor (weighted small), recomputed every cycle (Slurm's
  PriorityCalcPeriod); the Fair Tree ranking is ``policy.fairshare.tree``'s.
- ``budget``: ours, by calling the production policy every cycle: ``fair_share`` on the
  window's footprints, ``site_factors``, QOS alloc above free, then ``plan_requeues``.
- ``budget-nocontract``: the same order, never a requeue.

The policy modules are called through their module attributes (``fairshare.fair_share``,
not a name bound at import), so that what the daemon runs is what runs here, even
when a test swaps a function.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from slurm_ml.config.rules import associations
from slurm_ml.model import ALLOC_QOS
from slurm_ml.policy import fairshare, lane_requeue, reconcile
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import (
    AllocationPosition,
    PreemptionLedger,
    Requeue,
)
from slurm_ml.policy.fairshare import FairShare, PendingJob, gang, lane
from slurm_ml.policy.fairshare.gang import GangJob
from slurm_ml.policy.fairshare.tree import fair_tree_order, level_fs
from slurm_ml.policy.placement import NodeMap
from slurm_ml.sim import state as es
from slurm_ml.sim.room import placement_nodes, placement_nodes_now
from slurm_ml.sim.state import Key, SimState, Task

FIFO, SLURM_FAIRSHARE, BUDGET, BUDGET_NOCONTRACT = (
    "fifo", "slurm-fairshare", "budget", "budget-nocontract")
POLICIES = (FIFO, SLURM_FAIRSHARE, BUDGET, BUDGET_NOCONTRACT)


@dataclass(frozen=True, slots=True)
class BudgetCycleDecision:
    """What one cycle of a budget policy decided, and on what (for tests and reports)."""

    now: int  # epoch seconds, as the policies saw it
    fair: FairShare
    site_factors: dict[int, int]
    waiting: tuple[WaitingJob, ...]  # the queue in the order used, before requeues
    running: tuple[RunningJob, ...]
    positions: dict[str, AllocationPosition]
    ledger: PreemptionLedger
    free_gpus: dict[str, int]
    requeues: tuple[Requeue, ...] = ()


@dataclass(slots=True)
class CycleOutcome:
    """A policy cycle: its fair share (if it computed one), requeues, and details."""

    fair: FairShare | None = None
    requeues: list[Requeue] = field(default_factory=list)
    decision: BudgetCycleDecision | None = None
    reordered: bool = True  # keys may have changed: the engine re-sorts, then a full pass
    sorted: bool = False  # the policy has already put ``st.pending`` in key order


class Policy:
    """Orders the queue. ``key`` is for a job entering it between cycles; ``cycle``
    re-keys every pending job (the engine re-sorts) and may ask for requeues."""

    name = ""

    def key(self, st: SimState, task: Task) -> Key:
        raise NotImplementedError

    def cycle(self, st: SimState, *, decide: bool = True) -> CycleOutcome:
        """``decide``: fill ``CycleOutcome.decision`` (where a policy has one)."""
        for task in st.pending:
            task.key = self.key(st, task)
        return CycleOutcome()


class Fifo(Policy):
    name = FIFO

    def key(self, st: SimState, task: Task) -> Key:
        return (task.spec.submit_s, task.spec.job_id)

    def cycle(self, st: SimState, *, decide: bool = True) -> CycleOutcome:
        return CycleOutcome(reordered=False)  # submit times do not change


class SlurmFairshare(Policy):
    """Slurm's priority/multifactor with PriorityFlags=FAIR_TREE (Slurm's default)."""

    name = SLURM_FAIRSHARE

    def __init__(self, st: SimState) -> None:
        self.decayed: dict[tuple[str, str], float] = {}  # billing GPU-seconds, decayed
        self.seen: dict[tuple[str, str], float] = {}  # used() at the last cycle
        self.last_t: float | None = None
        self.factor: dict[tuple[str, str], float] = {}

    def key(self, st: SimState, task: Task) -> Key:
        s = st.settings
        age = min(1.0, max(0.0, st.now - task.pend_since) / s.max_age_s)
        priority = math.floor(s.weight_fairshare * self.factor.get(task.assoc, 0.0)
                              + s.weight_age * age)
        return (-priority, task.spec.submit_s, task.spec.job_id)

    def cycle(self, st: SimState, *, decide: bool = True) -> CycleOutcome:
        self._decay(st)
        tree = st.tree
        usage = [0.0] * len(tree.kinds)
        for assoc, used in self.decayed.items():
            leaf = tree.leaf_of.get(assoc)
            if leaf is not None:
                usage[leaf] = used
        for node in range(len(usage) - 1, 0, -1):
            usage[tree.parents[node]] += usage[node]
        lfs = level_fs(tree, usage)
        groups = fair_tree_order(tree, lfs)
        users = sum(len(g) for g in groups)
        factor: dict[tuple[str, str], float] = {}
        ahead = 0
        for group in groups:  # Slurm: tied users share the higher rank; rank / users
            rank = users - ahead
            for leaf in group:
                factor[tree.assoc_at[leaf]] = rank / users
            ahead += len(group)
        self.factor = factor
        s = st.settings
        w_fs, w_age, max_age, now = s.weight_fairshare, s.weight_age, s.max_age_s, st.now
        for task in st.pending:  # key(), inlined: every pending job, every cycle
            age = (now - task.pend_since) / max_age
            priority = math.floor(w_fs * factor.get(task.assoc, 0.0)
                                  + w_age * (1.0 if age > 1.0 else age if age > 0.0 else 0.0))
            task.key = (-priority, task.spec.submit_s, task.spec.job_id)
        return CycleOutcome()

    def _decay(self, st: SimState) -> None:
        """usage = usage x 2^(-elapsed / half-life) + the period's new usage (Slurm's
        decay thread: old usage decays, the period's run time is added undecayed)."""
        t = st.now
        decay = 1.0 if self.last_t is None else 0.5 ** ((t - self.last_t) / st.settings.half_life_s)
        self.last_t = t
        for assoc in set(self.decayed) | set(st.usage):
            used = st.used(assoc, t)
            new = used - self.seen.get(assoc, 0.0)
            self.seen[assoc] = used
            self.decayed[assoc] = self.decayed.get(assoc, 0.0) * decay + new


class Budget(Policy):
    """Ours: the daemon's cycle (fair share, SiteFactor, contracts) on the simulated state."""

    def __init__(self, st: SimState, *, contract: bool) -> None:
        self.name = BUDGET if contract else BUDGET_NOCONTRACT
        self.contract = contract
        self.account_band: dict[str, int] = {}  # SiteFactor admission gives a new job
        cfg = st.cfg
        self.associations = associations(cfg.budgets)
        self.lane_value = lane.lane_site_factor(cfg.policy.fairshare, self.associations)
        self.lane_cap = lane.lane_cap(st.cluster.total, cfg.policy.fast_lane)
        fl = cfg.policy.fast_lane  # submitd wakes the daemon for the lane's requeues
        self.lane_wakes = (contract and lane_requeue.wakes_on(fl)
                           and lane_requeue.lane_requeues_on(fl, st.cluster.total))
        self.lane_held: dict[str, int] | None = None  # the last cycle's (None: no cycle yet)
        self._lane_jobs: dict[int, lane.LaneJob | None] = {}
        self._lane_pending: dict[int, Task] = {}  # queued lane work, as of the last cycle
        self._class_factor: dict[tuple[str, str, int, bool], int] = {}  # the last cycle's
        self._laned: set[int] = set()  # the last cycle's raised jobs: lane members, gangs
        self._gangs: dict[int, Task] = {}  # queued gangs (``gang.is_gang``), as of the last cycle
        #: the running jobs, and the lane work among them, as of ``running_changes``
        self._running: tuple[int, list[RunningJob], list[lane.LaneJob]] = (-1, [], [])
        #: the last cycle with nothing waiting: ``running_changes`` then, and its decision
        self._idle: tuple[int, reconcile.CycleDecision] | None = None

    def lane_job(self, st: SimState, task: Task) -> lane.LaneJob | None:
        """The task as fast-lane work (a short alloc job within max_job_gpus), or None;
        the daemon's ``views.lane_jobs`` rule, on the trace's contract and run time."""
        job_id = task.spec.job_id
        if job_id in self._lane_jobs:
            return self._lane_jobs[job_id]
        job, cfg = task.spec, st.cfg
        got = None
        if (task.qos == ALLOC_QOS and 0 < job.gpus <= cfg.policy.fast_lane.max_job_gpus
                and lane.is_short_work(job.min_runtime_s / 60, job.duration_s / 60,
                                       cfg.policy.fairshare)):
            got = lane.LaneJob(job_id=job_id, account=job.team, gpus=job.gpus,
                               submit=st.stamp(job.submit_s))
        self._lane_jobs[job_id] = got
        return got

    def key(self, st: SimState, task: Task) -> Key:
        """Between cycles a new job has the SiteFactor admission gave it: its account's
        standing from the last cycle (submitd's ``AccountStanding.site_factor``), else 0;
        short work the lane's room at the last cycle (``AccountStanding.lane_gpus``), less
        what admission has put in the lane since (``policy.admission.state.lane_held``), the
        lane's (``routing.lane_route``)."""
        held = self.lane_held
        job = self.lane_job(st, task) if held is not None else None
        if job is not None and held is not None and lane.fits(
                job.account, job.gpus, held, sum(held.values()), self.lane_cap,
                cfg=st.cfg.policy.fast_lane):
            held[job.account] = held.get(job.account, 0) + job.gpus  # until the next cycle
            fl = st.cfg.policy.fast_lane
            # submitd wakes the daemon; the lane's requeue victims stop at once in the
            # sim (its requeue_grace_s is not modelled; QOS free's GraceTime is)
            if self.lane_wakes:
                heapq.heappush(st.wakes, lane_requeue.wake_for(st.now, fl))
            return self._key(task, fairshare.job_site_factor(
                self.lane_value, 0, st.cfg.policy.fairshare, True))
        return self._key(task, self.account_band.get(task.spec.team, 0))

    @staticmethod
    def _key(task: Task, site_factor: int) -> Key:
        tier = 0 if task.qos == ALLOC_QOS else 1  # PriorityWeightQOS: alloc above any band
        return (tier, -site_factor, task.pend_since, task.spec.job_id)

    def cycle(self, st: SimState, *, decide: bool = True) -> CycleOutcome:
        """The reconcile cycle (``policy.reconcile``) on the simulated state: the daemon's
        own, fed from the state's indexes. ``decide`` only records the whole queue and
        every job's SiteFactor; it never changes what is decided."""
        cfg = st.cfg
        now = st.stamp(st.now)
        lane_pending = self._lane_queued(st)
        gangs = self._gangs_queued(st)
        idle = not decide and not st.pending
        if idle and self._idle is not None and self._idle[0] == st.running_changes:
            # Nothing waits, as at the last such cycle, and no job has started or stopped
            # since: the cycle's input is that one's but for the clock, which a cycle
            # with nothing waiting does not read (``reconcile``: no fair share, no job to
            # price, starve or lane), so its decision is that one's.
            self._priced(st, self._idle[1], {}, {})
            return CycleOutcome(sorted=True)
        # One job per class: site_factors gives every job of a class its value, ranking
        # the same associations (every class of every pending association is there).
        reps = {cls: next(iter(tasks.values())).pending_job
                for cls, tasks in st.classes.items()}
        running, lane_running = self._running_work(st)
        by_class: dict[tuple[str, str, int, bool], int] = {}

        def priced(decision: reconcile.CycleDecision) -> None:
            self._priced(st, decision, reps, by_class)

        out = reconcile.reconcile(cfg, reconcile.CycleInput(
            now=now, footprints=st.ledger, pending_assocs=st.pending_assocs.keys(),
            pending=reps.values(), lane_pending=lane_pending, lane_running=lane_running,
            running=running, ledger=st.preemption_ledger(), queue=SimQueue(st),
            room=SimRoom(st, running), total_gpus=st.cluster.total,
            capacity=st.capacity, gangs=gangs), requeue=self.contract, priced=priced,
            fair_when_idle=decide)
        self._idle = (st.running_changes, out) if idle else None
        laned = out.raised
        if not self.contract:
            return CycleOutcome(fair=out.fair, sorted=True)
        requeues = list(out.all_requeues)
        decision = None
        if decide:
            factors = {t.spec.job_id: laned.get(t.spec.job_id, by_class[es.job_class(t)])
                       for t in st.pending}
            decision = BudgetCycleDecision(now=now, fair=out.standings, site_factors=factors,
                                           waiting=tuple(es.waiting_jobs(st)),
                                           running=tuple(running), positions=out.positions,
                                           ledger=st.preemption_ledger(),
                                           free_gpus=es.free_gpus(st),
                                           requeues=tuple(requeues))
        return CycleOutcome(fair=out.fair, requeues=requeues, decision=decision, sorted=True)

    def _priced(self, st: SimState, decision: reconcile.CycleDecision,
                reps: dict[tuple[str, str, int, bool], PendingJob],
                by_class: dict[tuple[str, str, int, bool], int]) -> None:
        """Slurm takes the SiteFactors at once in the simulation: the queue is re-keyed
        before the cycle reads it for starved jobs, and a job queued before the next
        cycle gets its account's band and the lane's room from this one (``key``).
        ``reps``: the job the cycle priced for each class; ``by_class`` receives each
        class's value."""
        by_class.update((cls, decision.site_factors[rep.job_id]) for cls, rep in reps.items())
        self.lane_held = dict(decision.lane.held)
        if self._rekey(st, by_class, decision.raised):  # else still in key order
            st.pending.sort(key=es.task_key)
        # no fair share: nothing waited, so no account was ranked (``reconcile``)
        standings = decision.fair.standings if decision.fair is not None else ()
        self.account_band = {s.account: s.site_factor for s in standings
                             if s.kind == "project" and s.site_factor is not None}

    def _rekey(self, st: SimState, by_class: dict[tuple[str, str, int, bool], int],
               laned: dict[int, int]) -> bool:
        """Give each pending job its key from this cycle's SiteFactors; True if one moved.

        Only a job whose SiteFactor may have changed needs it: one queued since the last
        cycle (keyed by ``key``), one in or out of the lane, or one of a class whose value
        changed. Every other job still has the key of its class's unchanged value."""
        todo: dict[int, Task] = {}
        last = self._class_factor
        for cls, value in by_class.items():
            if last.get(cls) != value:
                todo.update(st.classes[cls])
        # Only a job in the queue: one Slurm has just stopped (a preempted free job in
        # its requeue) is PENDING before it is queued again, and gets its key then.
        classes = st.classes
        for task in st.fresh:
            if task.spec.job_id in classes.get(es.job_class(task), ()):
                todo[task.spec.job_id] = task
        by_id = st.by_id
        for job_id in (*self._laned, *laned):
            task = by_id[job_id]
            if job_id in classes.get(es.job_class(task), ()):
                todo[job_id] = task
        self._class_factor = by_class
        self._laned = set(laned)
        moved = False
        for job_id, task in todo.items():
            factor = laned.get(job_id)
            if factor is None:
                factor = by_class[es.job_class(task)]
            key = self._key(task, factor)
            if key != task.key:
                task.key = key
                moved = True
        return moved

    def _running_work(self, st: SimState) -> tuple[list[RunningJob], list[lane.LaneJob]]:
        """The running jobs, and the lane work among them (the daemon's
        ``views.lane_jobs``), read again only when a job has started or stopped since the
        last cycle: most cycles of a long run have none. With no lane room (``lane_cap``)
        there is no lane work to give."""
        seen, running, lane_running = self._running
        if seen != st.running_changes:
            running = [t.running_job for t in st.running.values() if t.running_job is not None]
            lane_running = ([j for t in st.running.values()
                             if (j := self.lane_job(st, t)) is not None]
                            if self.lane_cap > 0 else [])
            self._running = (st.running_changes, running, lane_running)
        return running, lane_running

    def _gangs_queued(self, st: SimState) -> list[GangJob]:
        """The gangs queued (the daemon's ``views.CycleJobs.gangs``), kept from cycle to
        cycle as the lane's work is; none when the rule is off."""
        fcfg = st.cfg.policy.fairshare
        if not gang.rule_on(fcfg):
            return []
        queued = _kept_queued(self._gangs, st,
                              lambda t: gang.is_gang(t.spec.gpus, fcfg, t.qos))
        return [GangJob(job_id=j, gpus=t.spec.gpus, submit=st.stamp(t.spec.submit_s))
                for j, t in queued.items()]

    def _lane_queued(self, st: SimState) -> list[lane.LaneJob]:
        """The lane work queued, kept from cycle to cycle: the last cycle's queue, plus
        what has been queued since, less what has left."""
        if self.lane_cap <= 0:
            return []
        queued = _kept_queued(self._lane_pending, st,
                              lambda t: self.lane_job(st, t) is not None)
        # lane_members takes them oldest first, whatever the order given
        return [j for t in queued.values() if (j := self.lane_job(st, t)) is not None]


def _kept_queued(queued: dict[int, Task], st: SimState,
                 keep: Callable[[Task], bool]) -> dict[int, Task]:
    """``queued`` (job id -> task) kept from cycle to cycle: the last cycle's, plus the
    jobs queued since that ``keep`` takes, less those no longer pending. Updated in
    place and returned."""
    for task in st.fresh:
        if keep(task):
            queued[task.spec.job_id] = task
    for job_id in [j for j, t in queued.items() if t.state != es.PENDING]:
        del queued[job_id]
    return queued


class SimQueue:
    """The simulated queue as the cycle reads it (``policy.reconcile.WaitingQueue``):
    from the state's index of QOS alloc jobs per team, in the queue's order."""

    def __init__(self, st: SimState) -> None:
        self.st = st

    def alloc_accounts(self) -> Iterable[str]:
        return self.st.alloc_of.keys()

    def alloc_jobs(self, accounts: Collection[str]) -> list[WaitingJob]:
        """Their place (``order``) is not read: the cycle hands them to ``plan_requeues``
        as already in order, its only reader."""
        st = self.st
        out = [(task.key, task) for a in accounts for task in st.alloc_of.get(a, {}).values()]
        out.sort(key=itemgetter(0))  # keys are unique: they end in the job id
        return [es.waiting_job(st, task, -1) for _, task in out]

    def jobs(self, job_ids: Collection[int]) -> list[WaitingJob]:
        st = self.st
        return [es.waiting_job(st, st.by_id[j], -1) for j in job_ids]


class SimRoom:
    """The simulated nodes' room (``policy.reconcile.Room``): kept as jobs start and stop
    (``room.placement_nodes_now``), rebuilt only without this cycle's victims."""

    def __init__(self, st: SimState, running: Sequence[RunningJob]) -> None:
        self.st, self.running = st, running

    def __call__(self, gone: Collection[int]) -> NodeMap:
        if not gone:
            return placement_nodes_now(self.st)
        return placement_nodes(self.st, [r for r in self.running if r.job_id not in gone])


def make_policy(name: str, st: SimState) -> Policy:
    if name == FIFO:
        return Fifo()
    if name == SLURM_FAIRSHARE:
        return SlurmFairshare(st)
    if name in (BUDGET, BUDGET_NOCONTRACT):
        return Budget(st, contract=name == BUDGET)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
