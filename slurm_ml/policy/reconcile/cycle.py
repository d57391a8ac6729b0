"""One reconcile cycle's allocation decisions, for the daemon and the simulator alike.

The daemon (``daemon.plan``) and the simulator (``sim.policies.Budget``) both call
:func:`reconcile` with a :class:`CycleInput` built from what each knows: slurmctld's and
slurmdbd's reports, or the simulated state. The order of the steps lives here once:

1. fair share over the window's footprints;
2. each pending job's SiteFactor from it;
3. the fast lane and its members' SiteFactor, and the gangs raised after their wait
   (``fairshare.gang``), both laid over the bands' values (``CycleDecision.raised``);
4. the contracts' requeues for starved jobs;
5. the lane's own requeues, on the room step 4 leaves.

A cycle with nothing waiting decides nothing: no job to price, to start or to requeue
for. A driver that wants no standings then (``fair_when_idle=False``: the simulator, whose
report samples them on its own cadence) skips step 1, the cycle's one cost that grows with
the window; the daemon keeps it, for its metrics and ``budget status``.

Between steps 3 and 4 a driver whose queue takes the SiteFactors at once (the
simulator) applies them (``priced``). Steps 4 and 5 ask the driver for the queue and
the room only when there can be a requeue at all, so that the common cycle (nobody
starved, or no victim, or no budget) costs neither a walk over the queue nor a room.
A driver that wants the whole queue on record (a simulation that keeps its decisions)
reads it itself: what is recorded never changes what is decided.

The policy modules are called through their module attributes (``fairshare.fair_share``,
not a name bound at import), so that a test that swaps one changes both drivers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from slurm_ml.config import Config, ContractsConfig
from slurm_ml.config.rules import associations
from slurm_ml.policy import contracts, fairshare, lane_requeue
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import AllocationPosition, PreemptionLedger, Requeue
from slurm_ml.policy.fairshare import (
    FairShare,
    Footprint,
    FootprintLedger,
    PendingJob,
    gang,
    lane,
)
from slurm_ml.policy.fairshare.gang import GangJob
from slurm_ml.policy.fairshare.lane import Lane, LaneJob
from slurm_ml.policy.placement import NodeMap


class WaitingQueue(Protocol):
    """The jobs waiting for GPUs, as the contracts see them, read only when needed."""

    def alloc_accounts(self) -> Iterable[str]:
        """The accounts with a QOS alloc job waiting (only those can be starved)."""
        ...

    def alloc_jobs(self, accounts: Collection[str]) -> Sequence[WaitingJob]:
        """The QOS alloc jobs of ``accounts`` waiting, in scheduling order."""
        ...

    def jobs(self, job_ids: Collection[int]) -> Sequence[WaitingJob]:
        """Those of ``job_ids`` that wait, in any order."""
        ...


class Room(Protocol):
    """The cluster's room node by node (``placement.node_slots``)."""

    def __call__(self, gone: Collection[int]) -> NodeMap:
        """The room every running job but ``gone`` (this cycle's victims) leaves."""
        ...


@dataclass(frozen=True, slots=True)
class CycleInput:
    """What one cycle decides on. ``pending`` are the jobs to price: a driver may give
    one per class of jobs ``site_factors`` cannot tell apart (same account, user, nice
    and shortness) and give the class its value. ``held_back``: running jobs that are
    no victim this cycle (another rule acted on them, or Slurm is preempting them)."""

    now: int
    footprints: Iterable[Footprint] | FootprintLedger
    pending_assocs: Collection[tuple[str, str]]
    pending: Iterable[PendingJob]
    lane_pending: Sequence[LaneJob]
    lane_running: Sequence[LaneJob]
    running: Sequence[RunningJob]
    ledger: PreemptionLedger
    queue: WaitingQueue
    room: Room
    total_gpus: int
    capacity: float | None = None  # billing GPUs; None: from the config
    held_back: Collection[int] = frozenset()
    #: the pending gangs (``fairshare.gang.is_gang``): none when the rule is off
    gangs: Sequence[GangJob] = ()


@dataclass(frozen=True, slots=True)
class CycleDecision:
    """The cycle's decisions, and the values they were made from."""

    now: int
    #: None only when nothing waited and the driver asked for none (``fair_when_idle``)
    fair: FairShare | None
    site_factors: dict[int, int]  # for ``CycleInput.pending``
    lane: Lane
    lane_factors: dict[int, int]  # the lane's members, to lay over ``site_factors``
    positions: dict[str, AllocationPosition]
    starved: tuple[WaitingJob, ...] = ()
    requeues: tuple[Requeue, ...] = ()  # the contracts'
    lane_requeues: tuple[Requeue, ...] = ()  # the lane's own, after the contracts'
    #: the gangs raised after their wait (``fairshare.gang``), to lay over ``site_factors``
    gang_factors: dict[int, int] = field(default_factory=dict)

    @property
    def raised(self) -> dict[int, int]:
        """The SiteFactors laid over the bands' values: raised gangs, then lane members
        (a job in both takes the lane's, the higher)."""
        if not self.gang_factors:
            return self.lane_factors
        return {**self.gang_factors, **self.lane_factors}

    @property
    def all_requeues(self) -> tuple[Requeue, ...]:
        return self.requeues + self.lane_requeues

    @property
    def standings(self) -> FairShare:
        """``fair``, for a driver that always asks for it (``fair_when_idle``, the default)."""
        if self.fair is None:
            raise ValueError("this cycle computed no fair share: nothing waited and "
                             "fair_when_idle was off")
        return self.fair


def reconcile(cfg: Config, inp: CycleInput, *, requeue: bool = True,
              priced: Callable[[CycleDecision], None] | None = None,
              fair_when_idle: bool = True) -> CycleDecision:
    """The cycle's fair share, SiteFactors, fast lane and (``requeue``) requeues.

    ``priced`` is called with the SiteFactors before the queue is read, for a driver
    whose queue takes them at once: the simulator re-keys its queue there, so that the
    starved jobs are taken in the order this cycle gives them. The daemon passes none:
    Slurm's order is the one observed, and this cycle's SiteFactors reach it only when
    they are pushed, after the plan.

    ``fair_when_idle=False``: when nothing waits (no pending association, no lane work
    queued), fair share is not computed (``CycleDecision.fair`` is None) and no account
    has a position. Nothing else changes: with no association pending none is ranked,
    so no job has a SiteFactor, none is starved and the lane has no member."""
    fcfg = cfg.policy.fairshare
    fair: FairShare | None = None
    factors: dict[int, int] = {}
    positions: dict[str, AllocationPosition] = {}
    if fair_when_idle or inp.pending_assocs or inp.lane_pending:
        fair = fairshare.fair_share(cfg, inp.footprints, inp.now, inp.pending_assocs,
                                    capacity=inp.capacity)
        factors = fairshare.site_factors(fair, inp.pending, fcfg)
        positions = contracts.allocation_positions(fair, inp.running)
    members = fast_lane(cfg, inp.lane_pending, inp.lane_running, inp.total_gpus)
    laned = lane.lane_site_factors(members, inp.lane_pending, fcfg)
    gangs = (gang.gangs_first(inp.gangs, inp.now, fcfg, associations(cfg.budgets))
             if inp.gangs else {})
    decision = CycleDecision(now=inp.now, fair=fair, site_factors=factors, lane=members,
                             lane_factors=laned, positions=positions, gang_factors=gangs)
    if priced is not None:
        priced(decision)
    if not requeue:
        return decision
    candidates = ([r for r in inp.running if r.job_id not in inp.held_back]
                  if inp.held_back else list(inp.running))
    ccfg = cfg.policy.contracts
    starved, victims = starved_and_victims(inp.now, inp.queue, candidates, positions,
                                           inp.ledger, inp.total_gpus, ccfg)
    # nobody starved or no victim: plan_requeues would return [] (``starved_and_victims``)
    requeues = contracts.plan_requeues(
        inp.now, victims, starved, positions, inp.ledger, inp.room(()), inp.total_gpus,
        ccfg, in_order=True, pool_given=True) if starved and victims else []
    lane_requeues = _lane_requeues(cfg, inp, laned=laned, candidates=candidates,
                                   positions=positions, planned=requeues)
    if not (starved or requeues or lane_requeues):
        return decision  # the common cycle: ``replace`` costs more than the rest of it
    return replace(decision, starved=tuple(starved), requeues=tuple(requeues),
                   lane_requeues=tuple(lane_requeues))


def fast_lane(cfg: Config, pending: Sequence[LaneJob], running: Sequence[LaneJob],
              total_gpus: int) -> Lane:
    """The cycle's fast lane (``policy.fairshare.lane``) for the short work queued and
    running; ``why`` shows the same one."""
    return lane.lane_members(pending, running, total_gpus, cfg=cfg.policy.fast_lane,
                             fcfg=cfg.policy.fairshare, associations=associations(cfg.budgets))


def starved_and_victims(now: int, queue: WaitingQueue, running: Sequence[RunningJob],  # noqa: PLR0917
                        positions: dict[str, AllocationPosition], ledger: PreemptionLedger,
                        total_gpus: int,
                        cfg: ContractsConfig) -> tuple[list[WaitingJob], list[RunningJob]]:
    """The starved jobs in scheduling order and the possible victims, or ``[]`` for
    both when either is empty (``plan_requeues`` then has nothing to do).

    The shorter question first: most cycles have no account that can starve, and most
    of the rest no victim or no preemption budget, so the queue is read only for the
    accounts that can starve (``starving_accounts``), and only when there is a victim."""
    accounts = starving_accounts(now, queue.alloc_accounts(), positions, cfg)
    if not accounts:
        return [], []
    if contracts.preemption_budget_left(now, ledger, total_gpus, cfg) <= 0:
        return [], []
    victims = narrow_victims(now, running, positions, ledger, cfg)
    if not victims:
        return [], []
    starved = starved_of(now, queue.alloc_jobs(accounts), positions, cfg)
    return (starved, victims) if starved else ([], [])


def starving_accounts(now: int, accounts: Iterable[str],
                      positions: dict[str, AllocationPosition],
                      cfg: ContractsConfig) -> list[str]:
    """Those of ``accounts`` whose position a job of theirs could be starved with
    (``is_starved`` of a probe job that has waited forever); no other account's job is
    starved, because the job's own part of the rule is its wait and its reason."""
    waiting = list(accounts)
    if not waiting:  # most cycles of a quiet cluster: no probe to build
        return []
    probe = contracts.probe_job(now - (1 << 40))
    return [a for a in waiting if contracts.is_starved(now, probe, positions.get(a), {}, cfg)]


def starved_of(now: int, waiting: Iterable[WaitingJob],
               positions: dict[str, AllocationPosition],
               cfg: ContractsConfig) -> list[WaitingJob]:
    """The waiting jobs starved even with no GPU free (``is_starved`` with nothing free,
    that is the job's and its allocation's part of the rule): any other never becomes
    starved during the plan, because its ratio, wait and reason do not change there, only
    the free GPUs do. The allocation's part is asked once per account."""
    may: dict[str, bool] = {}
    out: list[WaitingJob] = []
    for w in waiting:
        ok = may.get(w.account)
        if ok is None:
            ok = may[w.account] = contracts.account_may_starve(positions.get(w.account), cfg)
        if ok and contracts.job_may_starve(now, w, cfg):
            out.append(w)
    return out


def narrow_victims(now: int, running: Iterable[RunningJob],
                   positions: dict[str, AllocationPosition], ledger: PreemptionLedger,
                   cfg: ContractsConfig) -> list[RunningJob]:
    """The running jobs requeueable for someone (``contracts.requeueable``, the pool
    ``plan_requeues`` itself draws its victims from)."""
    return contracts.requeueable(now, running, positions, ledger, cfg)


def _lane_requeues(cfg: Config, inp: CycleInput, *, laned: dict[int, int],
                   candidates: Sequence[RunningJob],
                   positions: dict[str, AllocationPosition],
                   planned: Sequence[Requeue]) -> list[Requeue]:
    """The lane's own requeues (``policy.lane_requeue``) for its waiting members, on the
    room the contracts' requeues (``planned``) leave."""
    fl, ccfg = cfg.policy.fast_lane, cfg.policy.contracts
    if not laned or lane_requeue.lane_budget_left(inp.now, inp.ledger, inp.total_gpus,
                                                  fl, ccfg) <= 0:
        return []
    waiting = inp.queue.jobs(laned.keys())
    if not waiting:
        return []
    gone = {rq.victim for rq in planned}
    left = [r for r in candidates if r.job_id not in gone] if gone else candidates
    after = contracts.after_requeues(positions, planned) if planned else positions
    return lane_requeue.plan_lane_requeues(
        inp.now, left, waiting, after, inp.ledger, inp.room(gone), inp.total_gpus, fl, ccfg,
        short={j.job_id for j in inp.lane_running})
