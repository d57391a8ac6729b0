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
from dataclasses import dataclass, field
from operator import itemgetter

from slurm_ml.config import ContractsConfig
from slurm_ml.config.rules import associations
from slurm_ml.model import ALLOC_QOS
from slurm_ml.policy import contracts, fairshare, lane_requeue
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import (
    AllocationPosition,
    PreemptionLedger,
    Requeue,
    allocation_positions,
)
from slurm_ml.policy.fairshare import FairShare, lane
from slurm_ml.policy.fairshare.tree import fair_tree_order, level_fs
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
        self._laned: set[int] = set()  # the last cycle's lane members

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
        what admission has put in the lane since (``admission_state.lane_held``), the
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
        cfg = st.cfg
        now = st.stamp(st.now)
        fair = fairshare.fair_share(cfg, st.ledger, now, st.pending_assocs.keys(),
                                    capacity=st.capacity)
        # One job per class: site_factors gives every job of a class its value, ranking
        # the same associations (every class of every pending association is there).
        reps = {cls: next(iter(tasks.values())).pending_job
                for cls, tasks in st.classes.items()}
        per_rep = fairshare.site_factors(fair, reps.values(), cfg.policy.fairshare)
        by_class = {cls: per_rep[rep.job_id] for cls, rep in reps.items()}
        laned = self._lane(st)
        moved = self._rekey(st, by_class, laned)
        if moved:  # else the queue is still in key order (the engine keeps it sorted)
            st.pending.sort(key=es.task_key)
        self.account_band = {s.account: s.site_factor for s in fair.standings
                             if s.kind == "project" and s.site_factor is not None}
        if not self.contract:
            return CycleOutcome(fair=fair, sorted=True)
        running = [t.running_job for t in st.running.values() if t.running_job is not None]
        pos = allocation_positions(fair, running)
        ledger = st.preemption_ledger()
        ccfg = cfg.policy.contracts
        waiting: list[WaitingJob] = []
        if decide:
            waiting = es.waiting_jobs(st)
            starved = starved_of(now, waiting, pos, ccfg)
            victims = narrow_victims(now, running, pos, ledger, ccfg) if starved else []
        else:  # the same two lists, the shorter first: most cycles have no victim at all
            # (with no preemption budget left, plan_requeues returns [] at once)
            teams = self._starving_teams(st, now, pos)
            victims = (narrow_victims(now, running, pos, ledger, ccfg) if teams and
                       contracts.preemption_budget_left(now, ledger, st.cluster.total,
                                                        ccfg) > 0 else [])
            starved = self._starved(st, now, pos, teams) if victims else []
        # no starved job or no victim: plan_requeues has nothing to do and returns []
        # (see ``narrow``), so the room is not built
        requeues = contracts.plan_requeues(now, victims, starved, pos, ledger,
                                           placement_nodes_now(st),
                                           st.cluster.total, ccfg, in_order=not decide,
                                           pool_given=True) if starved and victims else []
        requeues += self._lane_requeues(st, now, laned, running, pos, ledger, requeues)
        decision = None
        if decide:
            factors = {t.spec.job_id: laned.get(t.spec.job_id, by_class[es.job_class(t)])
                       for t in st.pending}
            decision = BudgetCycleDecision(now=now, fair=fair, site_factors=factors,
                                           waiting=tuple(waiting), running=tuple(running),
                                           positions=pos, ledger=ledger,
                                           free_gpus=es.free_gpus(st),
                                           requeues=tuple(requeues))
        return CycleOutcome(fair=fair, requeues=requeues, decision=decision, sorted=True)

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
        for task in st.fresh:
            if task.state == es.PENDING:
                todo[task.spec.job_id] = task
        by_id = st.by_id
        for job_id in (*self._laned, *laned):
            task = by_id[job_id]
            if task.state == es.PENDING:
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

    def _lane_requeues(self, st: SimState, now: int, laned: dict[int, int],  # noqa: PLR0917
                       running: list[RunningJob], pos: dict[str, AllocationPosition],
                       ledger: PreemptionLedger, planned: list[Requeue]) -> list[Requeue]:
        """The lane's own requeues (``policy.lane_requeue``) for this cycle's waiting lane
        members, on the room the contracts' requeues leave, as the daemon plans them."""
        fl, ccfg = st.cfg.policy.fast_lane, st.cfg.policy.contracts
        if not laned or lane_requeue.lane_budget_left(now, ledger, st.cluster.total,
                                                      fl, ccfg) <= 0:
            return []
        waiting = [es.waiting_job(st, st.by_id[j], -1) for j in laned]
        gone = {rq.victim for rq in planned}
        left = [r for r in running if r.job_id not in gone] if gone else running
        nodes = placement_nodes(st, left) if gone else placement_nodes_now(st)
        short = {t.spec.job_id for t in st.running.values() if self.lane_job(st, t) is not None}
        after = contracts.after_requeues(pos, planned) if planned else pos
        return lane_requeue.plan_lane_requeues(now, left, waiting, after, ledger, nodes,
                                               st.cluster.total, fl, ccfg, short)

    @staticmethod
    def _starving_teams(st: SimState, now: int,
                        positions: dict[str, AllocationPosition]) -> list[str]:
        """The teams with alloc jobs queued whose position a job of theirs could be
        starved with (``is_starved`` of a probe job that has waited forever); no other
        team's job is starved."""
        cfg = st.cfg.policy.contracts
        probe = contracts.probe_job(now - (1 << 40))
        return [team for team in st.alloc_of
                if contracts.is_starved(now, probe, positions.get(team), {}, cfg)]

    @staticmethod
    def _starved(st: SimState, now: int, positions: dict[str, AllocationPosition],
                 teams: list[str]) -> list[WaitingJob]:
        """``starved_of`` the whole queue, from the alloc jobs of ``teams``
        (``_starving_teams``), in queue order. Their ``order`` is not their place: the
        caller passes them to ``plan_requeues`` as already in order (``in_order``), the
        only reader of ``order``."""
        cfg = st.cfg.policy.contracts
        out: list[tuple[Key, WaitingJob]] = []
        for team in teams:
            pos = positions.get(team)
            for task in st.alloc_of[team].values():
                w = es.waiting_job(st, task, -1)
                if contracts.is_starved(now, w, pos, {}, cfg):
                    out.append((task.key, w))
        out.sort(key=itemgetter(0))  # the queue's order (keys are unique: they end in the job id)
        return [w for _, w in out]

    def _lane(self, st: SimState) -> dict[int, int]:
        """This cycle's fast lane (``policy.fairshare.lane``, as the daemon's cycle runs
        it) and its members' SiteFactor; its room is what admission sees until the next."""
        cfg = st.cfg
        if self.lane_cap <= 0:
            self.lane_held = {}
            return {}
        queued = self._lane_pending  # the lane work queued: the last cycle's, plus what
        for task in st.fresh:          # has been queued since, less what has left
            if self.lane_job(st, task) is not None:
                queued[task.spec.job_id] = task
        for job_id in [j for j, t in queued.items() if t.state != es.PENDING]:
            del queued[job_id]
        # lane_members takes them oldest first, whatever the order given
        pending = [j for t in queued.values() if (j := self.lane_job(st, t)) is not None]
        running = [j for t in st.running.values() if (j := self.lane_job(st, t)) is not None]
        got = lane.lane_members(pending, running, st.cluster.total,
                                cfg=cfg.policy.fast_lane, fcfg=cfg.policy.fairshare,
                                associations=self.associations)
        self.lane_held = dict(got.held)
        return lane.lane_site_factors(got, pending, cfg.policy.fairshare)


def narrow(now: int, running: list[RunningJob], waiting: list[WaitingJob],  # noqa: PLR0917
           positions: dict[str, AllocationPosition], ledger: PreemptionLedger,
           cfg: ContractsConfig) -> tuple[list[RunningJob], list[WaitingJob]]:
    """The running jobs that could be requeued for someone and the waiting jobs that
    could ask, so that ``plan_requeues`` (which tries every victim for every starved
    job) gets the same answer from fewer of each: ``starved_of`` and ``narrow_victims``,
    and neither when the other is empty (``plan_requeues`` then returns nothing)."""
    starved = starved_of(now, waiting, positions, cfg)
    if not starved:
        return [], []
    victims = narrow_victims(now, running, positions, ledger, cfg)
    return victims, starved if victims else []


def starved_of(now: int, waiting: list[WaitingJob],
               positions: dict[str, AllocationPosition],
               cfg: ContractsConfig) -> list[WaitingJob]:
    """The waiting jobs starved even with no GPU free (``is_starved`` with nothing free):
    any other never becomes starved during the plan, because its ratio, wait and reason
    do not change there, only the free GPUs do."""
    return [w for w in waiting
            if contracts.is_starved(now, w, positions.get(w.account), {}, cfg)]


def narrow_victims(now: int, running: list[RunningJob],
                   positions: dict[str, AllocationPosition], ledger: PreemptionLedger,
                   cfg: ContractsConfig) -> list[RunningJob]:
    """The running jobs requeueable for someone (``contracts.requeueable``, the pool
    ``plan_requeues`` itself draws its victims from)."""
    return contracts.requeueable(now, running, positions, ledger, cfg)


def make_policy(name: str, st: SimState) -> Policy:
    if name == FIFO:
        return Fifo()
    if name == SLURM_FAIRSHARE:
        return SlurmFairshare(st)
    if name in (BUDGET, BUDGET_NOCONTRACT):
        return Budget(st, contract=name == BUDGET)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
