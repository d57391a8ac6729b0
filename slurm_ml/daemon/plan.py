"""Decide: one cycle's ``Plan`` from an ``Observation`` (pure; the clock is ``obs.now``).

Each action carries an idempotency key derived from what it acts on (job id *and* that
run's start time, node and cause), so the same decision in a later cycle, or after a
crash and restart, has the same key and is applied at most once.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slurm_ml.config import Config, ContractsConfig
from slurm_ml.daemon import views
from slurm_ml.daemon.observe import Observation
from slurm_ml.daemon.repair_view import node_events
from slurm_ml.model import ALLOC_QOS, Job, JobState
from slurm_ml.policy import contracts, fairshare, preempt_grace, reconcile
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import (
    AllocationPosition,
    PreemptionLedger,
    preemption_budget_left,
)
from slurm_ml.policy.fairshare import FairShare, Footprint
from slurm_ml.policy.fairshare.lane import Lane
from slurm_ml.policy.placement import NodeMap, NodeSpec, cluster_nodes, node_slots
from slurm_ml.policy.reclaim import (
    ZombieStatus,
    orphan_drains,
    stuck_completing,
    zombie_status,
    zombie_verdicts,
)
from slurm_ml.policy.refunds import Refund
from slurm_ml.policy.repairs import RepairPlan, current_findings, plan_repairs
from slurm_ml.store.records import BudgetSnapshot, ReconcilerDecision, UtilSample, derive_key

#: Decision kinds that requeued a job: the cooldown counts them all, the cluster cap all
#: but the fast lane's (``lane_requeue``: a cap of its own, ``ledger``).
REQUEUE_KINDS = ("requeue", "lane_requeue", "zombie_requeue", "repair_requeue")
#: The decision a requeue with a grace records when it signals (``daemon.apply``); the
#: requeue's own decision follows at the grace's end.
SIGNAL_KIND = "requeue_signal"
#: The decision of a requeue that finishes Slurm's own preemption of a job whose grace
#: ended (:mod:`slurm_ml.policy.preempt_grace`): Slurm chose it, so no cap or cooldown
#: counts it.
PREEMPT_KIND = "preempt_requeue"
#: How long after its grace a signal with no requeue decision still holds its starved
#: job back from new requeues (the next cycles finish it; this bounds a lost one).
IN_FLIGHT_SLACK_S = 300


@dataclass(frozen=True, slots=True)
class Action:
    """One thing to do to Slurm. ``kind`` is the Slurm operation, ``decision`` the
    reason class recorded for ``why`` and the audit log."""

    kind: str  # "requeue" | "cancel" | "drain" | "warn" | "fix_runaway"
    decision: str  # "requeue" | "zombie_warn" | "zombie_requeue" | "zombie_cancel" | ...
    key: str
    reason: str
    job_id: int | None = None
    node: str | None = None
    gpus: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        if self.node:
            # a quarantine drain is audited as the hooks audit theirs (target: the node):
            # the periodic check then resumes it, and the breakers count it
            return self.node if self.decision == "drain" else f"node {self.node}"
        return f"job {self.job_id}" if self.job_id is not None else "slurmdbd"


@dataclass(frozen=True, slots=True)
class Plan:
    now: int
    cycle: int
    fair: FairShare
    site_factors: dict[int, int]  # every pending job's target SiteFactor
    changed: dict[int, int]  # only those that differ from what Slurm has now
    actions: tuple[Action, ...]
    snapshots: tuple[BudgetSnapshot, ...]
    #: when this plan wants its next cycles: the ends of Slurm's preemption graces
    wake_at: tuple[int, ...] = ()
    #: the allocations with a job starved now (``starved_waits``): how long the one
    #: starved longest has waited, seconds
    starved: dict[str, int] = field(default_factory=dict)


def _epoch(at: datetime) -> int:
    return int(at.timestamp())


@dataclass(frozen=True, slots=True)
class Signalled:
    """A requeue whose checkpoint signal was sent and whose requeue is not recorded yet:
    its victim is as good as gone and its GPUs as good as spent."""

    victim: int
    kind: str  # the requeue's decision: "requeue", "lane_requeue", ...
    gpus: int
    at: int  # when it was signalled
    requeue_after: int
    for_job: int | None


def action_json(a: Action) -> dict[str, Any]:
    """``a`` as a ``requeue_signal`` decision keeps it (``signalled_action`` reads it)."""
    return {"kind": a.kind, "decision": a.decision, "key": a.key, "reason": a.reason,
            "job_id": a.job_id, "node": a.node, "gpus": a.gpus, "details": a.details}


def signalled_action(d: ReconcilerDecision) -> Action:
    """The requeue a ``requeue_signal`` decision promised, as its plan had it."""
    a = d.details["action"]
    return Action(kind=a["kind"], decision=a["decision"], key=a["key"], reason=a["reason"],
                  job_id=a["job_id"], node=a["node"], gpus=a["gpus"], details=a["details"])


def signalled(history: Sequence[ReconcilerDecision]) -> list[Signalled]:
    """The signals in ``history`` whose requeue decision is not in it (yet)."""
    done = {d.idempotency_key for d in history if d.kind in REQUEUE_KINDS}
    out: list[Signalled] = []
    for d in history:
        if d.kind != SIGNAL_KIND or d.dry_run or d.job_id is None:
            continue
        a = signalled_action(d)
        if a.key in done:
            continue
        at, after, for_job = _epoch(d.decided_at), d.details.get("requeue_after"), \
            a.details.get("for_job")
        out.append(Signalled(
            victim=d.job_id, kind=a.decision, gpus=a.gpus, at=at,
            requeue_after=after if isinstance(after, int) else at,
            for_job=for_job if isinstance(for_job, int) else None))
    return out


def ledger(history: Sequence[ReconcilerDecision]) -> PreemptionLedger:
    """slurm-ml's past requeues: every kind counts for the per-job cooldown; the fast
    lane's go to its own cap (``lane_recent``), the others to the cluster's.

    A requeue still in its grace counts from its signal: otherwise the cycles inside the
    grace (a woken one every few seconds) would see neither its GPUs spent nor its
    victim taken, and could requeue past the cap or pick the victim again."""
    last: dict[int, int] = {}
    recent: list[tuple[int, int]] = []
    lane: list[tuple[int, int]] = []

    def count(job_id: int, kind: str, at: int, gpus: object) -> None:
        last[job_id] = max(last.get(job_id, 0), at)
        (lane if kind == "lane_requeue" else recent).append(
            (at, gpus if isinstance(gpus, int) else 0))

    for d in history:
        if d.kind in REQUEUE_KINDS and d.job_id is not None:
            count(d.job_id, d.kind, _epoch(d.decided_at), d.details.get("gpus"))
    for sig in signalled(history):
        count(sig.victim, sig.kind, sig.at, sig.gpus)
    return PreemptionLedger(last_requeue=last, recent=recent, lane_recent=lane)


def room_coming(history: Sequence[ReconcilerDecision], now: int) -> set[int]:
    """Jobs a signalled requeue is making room for: no new requeue for them while
    their victim's grace runs (and ``IN_FLIGHT_SLACK_S`` after)."""
    return {s.for_job for s in signalled(history)
            if s.for_job is not None and now <= s.requeue_after + IN_FLIGHT_SLACK_S}


def warned_at(history: Sequence[ReconcilerDecision]) -> dict[int, int]:
    out: dict[int, int] = {}
    for d in history:
        if d.kind == "zombie_warn" and d.job_id is not None:
            out[d.job_id] = max(out.get(d.job_id, 0), _epoch(d.decided_at))
    return out


def snapshots(fair: FairShare, now: int,
              lane: Lane | None = None) -> tuple[BudgetSnapshot, ...]:
    """One snapshot per tree node above the users; a project's carries the GPUs its
    short jobs hold in the fast lane (what admission reads to admit into the lane)."""
    taken = datetime.fromtimestamp(now, UTC)
    out = []
    for s in fair.standings:
        if s.kind == "user":
            continue
        up = fair.node(s.path[:-1]) if len(s.path) > 1 else None
        parent = up.account if up is not None else None
        out.append(BudgetSnapshot(
            idempotency_key=derive_key("budget_snapshot", s.account, taken), taken_at=taken,
            account=s.account, parent=parent, budget_share=s.budget_share,
            usage_gpu_hours=s.delivered, owed_gpu_hours=s.owed, site_factor=s.site_factor,
            lane_gpus=(lane.held.get(s.account, 0) if lane is not None and s.kind == "project"
                       else None)))
    return tuple(out)


def current_fair_share(cfg: Config, obs: Observation,
                       refunds: Sequence[Refund] | None = None) -> FairShare:
    """The window's fair share, ranking the associations that have jobs pending now;
    runs a slurm-ml drain ended (``refunds``, else :func:`views.run_refunds`) uncharged.
    The same value as the cycle's (``reconcile``), for the commands that show it."""
    if refunds is None:
        refunds = views.run_refunds(cfg, obs.usage, obs.drains)
    footprints, assocs = _demand(cfg, obs, refunds)
    return fairshare.fair_share(cfg, footprints, obs.now, assocs)


def _demand(cfg: Config, obs: Observation, refunds: Sequence[Refund],
            jobs: views.CycleJobs | None = None,
            ) -> tuple[list[Footprint], set[tuple[str, str]]]:
    """The window's footprints (runs in ``refunds`` uncharged) and the associations
    with jobs pending now, the only ones fair share ranks; ``jobs``: ``obs.jobs`` as
    the caller read them already."""
    if jobs is None:
        jobs = views.CycleJobs(cfg, obs.jobs)
    uncharged = {(r.job_id, r.start) for r in refunds}
    return (jobs.footprints(obs.usage, uncharged),
            {(p.account, p.user) for p in jobs.pending})


def fast_lane(cfg: Config, jobs: Sequence[Job]) -> Lane:
    """This cycle's fast lane for short work (:mod:`slurm_ml.policy.fairshare.lane`)."""
    pending, running = views.lane_jobs(cfg, jobs)
    return reconcile.fast_lane(cfg, pending, running, cfg.total_gpus())


@dataclass(frozen=True, slots=True)
class ObservedQueue:
    """The jobs waiting for GPUs in Slurm's order (``views.CycleJobs.waiting``) but those
    in ``coming``, as the cycle reads them (``policy.reconcile.WaitingQueue``): each
    read builds only the ``WaitingJob`` values it returns."""

    waiting: views.CycleJobs
    coming: Collection[int] = frozenset()

    def alloc_accounts(self) -> list[str]:
        coming = self.coming
        return list(dict.fromkeys(j.account for j in self.waiting.waiting_order()
                                  if j.qos == ALLOC_QOS and j.job_id not in coming))

    def alloc_jobs(self, accounts: Collection[str]) -> list[WaitingJob]:
        wanted, coming = set(accounts), self.coming
        return self.waiting.waiting_where(
            lambda j: j.qos == ALLOC_QOS and j.account in wanted and j.job_id not in coming)

    def jobs(self, job_ids: Collection[int]) -> list[WaitingJob]:
        wanted, coming = set(job_ids), self.coming
        return self.waiting.waiting_where(lambda j: j.job_id in wanted and j.job_id not in coming)


@dataclass(frozen=True, slots=True)
class ObservedRoom:
    """The room slurmctld's nodes have (``policy.reconcile.Room``)."""

    nodes: Sequence[NodeSpec]
    running: Sequence[RunningJob]

    def __call__(self, gone: Collection[int]) -> NodeMap:
        running = [r for r in self.running if r.job_id not in gone] if gone else self.running
        return node_slots(self.nodes, running)


def starved_waits(now: int, queue: ObservedQueue,
                  positions: dict[str, AllocationPosition], room: ObservedRoom,
                  cfg: ContractsConfig) -> dict[str, int]:
    """Each allocation with a job starved now (``contracts.is_starved``: allocated work
    of an under-served allocation, waiting past ``preempt_after_wait_s`` for GPUs that
    are not free), and how long its longest-starved job has waited.

    Whether the contracts can help it (a victim, the preemption cap) does not matter
    here: a job starved with no remedy is what an operator must hear of. The accounts
    and jobs that can starve at all are found as the cycle finds them
    (``reconcile.starving_accounts``, ``starved_of``), so the usual cycle reads no queue
    and builds no room; then, oldest first, each account's first job that cannot be
    placed now (the placement asked once per shape)."""
    accounts = reconcile.starving_accounts(now, queue.alloc_accounts(), positions, cfg)
    if not accounts:
        return {}
    waiting = reconcile.starved_of(now, queue.alloc_jobs(accounts), positions, cfg)
    if not waiting:
        return {}
    nodes = room(())
    fits: dict[tuple[int, frozenset[str]], bool] = {}
    out: dict[str, int] = {}
    for w in sorted(waiting, key=lambda w: (w.submit, w.order)):
        if w.account in out:
            continue
        shape = (w.gpus, w.gpu_types)
        if shape not in fits:
            fits[shape] = not contracts.is_starved(now, w, positions.get(w.account), nodes,
                                                   cfg)
        if not fits[shape]:
            out[w.account] = now - w.submit
    return out


def refund_actions(refunds: Sequence[Refund], done: Collection[str]) -> list[Action]:
    """One ``refund`` record per refunded run, keyed by the run alone (a drain that
    explains it better, found a cycle later, records no second refund), so that the audit
    log holds each refund once; those already recorded (``done``) are not planned."""
    out = []
    for r in refunds:
        key = derive_key("daemon.refund", r.job_id, r.start)
        if key in done:
            continue
        out.append(Action(
            kind="refund", decision="refund", key=key, job_id=r.job_id, reason=r.why,
            details={"account": r.account, "user": r.user, "start": r.start, "end": r.end,
                     "state": r.state.value, "route": r.route,
                     "gpu_hours": round(r.gpu_hours, 4),
                     "billing_gpu_hours": round(r.billing_gpu_hours, 4),
                     "drain": {"key": r.drain.key, "node": r.drain.node, "at": r.drain.at,
                               "hook": r.drain.hook, "job_id": r.drain.job_id,
                               "findings": list(r.drain.checks),
                               "reason": r.drain.reason}}))
    return out


def zombie_status_of(cfg: Config, jobs: Sequence[Job], samples: Sequence[UtilSample],
                     job_id: int, now: int) -> ZombieStatus | None:
    """What the zombie rule makes of ``job_id`` at ``now`` from the same values a cycle
    reads (None: not a running GPU job). ``why`` shows it: a job with no verdict, and why
    (a GPU never sampled, a gap in the samples), leaves no decision to read back."""
    job = next((r for r in views.running_jobs(cfg, jobs) if r.job_id == job_id), None)
    if job is None:
        return None
    mine = views.gpu_samples({job_id: samples}).get(job_id, [])
    return zombie_status(now, job, mine, cfg.policy.reclaim)


def plan_cycle(cfg: Config, obs: Observation) -> Plan:
    """Everything this cycle would do, decided from ``obs`` alone."""
    with _young_collections_only():
        return _plan_cycle(cfg, obs)


@contextlib.contextmanager
def _young_collections_only() -> Iterator[None]:
    """No full collection by the cyclic garbage collector while a pass runs.

    A pass builds some 400,000 values beside an observation of as many, and all of them
    live until it ends: every full collection meanwhile walks them all and frees
    nothing, and a pass made two to four, a quarter of its time. The young collections
    go on: the requeue planner's search leaves reference cycles behind (900,000 objects
    on a contended cluster, which kept for the pass would double its memory). The next
    full collection comes after the pass, once one is due."""
    threshold = gc.get_threshold()
    gc.set_threshold(threshold[0], threshold[1], 1 << 30)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


def _plan_cycle(cfg: Config, obs: Observation) -> Plan:
    now = obs.now
    jobs = obs.jobs
    refunds = views.run_refunds(cfg, obs.usage, obs.drains)
    actions: list[Action] = refund_actions(refunds, obs.refunded)
    if obs.runaway and cfg.policy.reclaim.fix_runaway:
        ids = sorted(obs.runaway)
        actions.append(Action(
            kind="fix_runaway", decision="fix_runaway",
            key=derive_key("daemon.fix_runaway", ids),
            reason=f"slurmdbd lists {len(ids)} runaway job(s) that slurmctld does not know; "
                   f"closing them so their usage stops growing",
            details={"jobs": ids}))

    # every way the cycle reads the jobs, each job worked out once
    table = views.CycleJobs(cfg, jobs)
    running = table.running
    starts = {r.job_id: r.start for r in running}
    history = list(obs.history)
    acted: set[int] = set()
    for job in preempt_grace.overdue(now, jobs):
        acted.add(job.job_id)
        actions.append(Action(
            kind="requeue", decision=PREEMPT_KIND, job_id=job.job_id, gpus=job.total_gpus,
            reason=preempt_grace.why_overdue(job, now),
            key=derive_key(f"daemon.{PREEMPT_KIND}", job.job_id, job.start_time),
            details={"gpus": job.total_gpus, "qos": job.qos,
                     "preempt_time": job.preempt_time, "grace_end": job.end_time}))
    zombies = [z for z in zombie_verdicts(now, running, views.gpu_samples(obs.samples),
                                          warned_at(history), cfg.policy.reclaim)
               if z.job_id not in acted]
    gpus_of = {r.job_id: r.gpus for r in running}
    for z in zombies:
        kind = {"warn": "warn", "requeue": "requeue", "cancel": "cancel"}[z.action]
        decision = f"zombie_{z.action}"
        acted.add(z.job_id)
        gpus = gpus_of.get(z.job_id, 0)
        # A job that woke up and went idle again gets a new warning: last_busy is part of
        # what the warning is about.
        cause = z.details.get("last_busy") if z.action == "warn" else None
        actions.append(Action(
            kind=kind, decision=decision, job_id=z.job_id, gpus=gpus, reason=z.reason,
            key=derive_key(f"daemon.{decision}", z.job_id, starts.get(z.job_id), cause),
            details={**z.details, "gpus": gpus}))

    # a job Slurm preempted is on its way out: no requeue of ours picks it
    graced = {j.job_id for j in jobs if preempt_grace.in_grace(j)}
    book = ledger(history)
    # this cycle's zombie requeues use up the cluster cap too
    book = PreemptionLedger(last_requeue=book.last_requeue, recent=[
        *book.recent, *((now, a.gpus) for a in actions if a.decision == "zombie_requeue")],
        lane_recent=book.lane_recent)
    coming = room_coming(history, now)
    footprints, assocs = _demand(cfg, obs, refunds, table)
    lane_pending, lane_running = table.lane
    queue = ObservedQueue(table, coming)
    room = ObservedRoom(cluster_nodes(cfg, obs.nodes), running)
    cycle = reconcile.reconcile(cfg, reconcile.CycleInput(
        now=now, footprints=footprints, pending_assocs=assocs, pending=table.pending,
        lane_pending=lane_pending, lane_running=lane_running, running=running, ledger=book,
        queue=queue, room=room, total_gpus=cfg.total_gpus(), held_back=acted | graced,
        gangs=table.gangs))
    targets = {**cycle.site_factors, **cycle.raised}
    current = {j.job_id: j.site_factor for j in jobs if j.state == JobState.PENDING}
    # None: sprio does not list the job (held, dependency, begin time, a requeued job's
    # restart delay); pushing it every cycle would change nothing visible. It is set in
    # the first cycle sprio lists it.
    changed = {job: v for job, v in targets.items()
               if current.get(job) is not None and current.get(job) != v}
    for decision, rq in [*(("requeue", r) for r in cycle.requeues),
                         *(("lane_requeue", r) for r in cycle.lane_requeues)]:
        actions.append(Action(
            kind="requeue", decision=decision, job_id=rq.victim, gpus=rq.gpus,
            reason=rq.reason,
            key=derive_key(f"daemon.{decision}", rq.victim, starts.get(rq.victim)),
            details={**rq.details, "gpus": rq.gpus, "for_job": rq.for_job,
                     "victim_account": rq.victim_account, "for_account": rq.for_account}))

    node_map = {n.name: n for n in obs.nodes}
    drains = [*stuck_completing(now, views.completing_jobs(jobs), node_map, cfg.policy.reclaim),
              *orphan_drains(now, views.orphan_reports(obs.orphans), node_map,
                             cfg.policy.reclaim)]
    seen: set[str] = set()
    for d in drains:
        if d.node in seen:
            continue
        seen.add(d.node)
        decision = f"drain_{d.kind}"
        cause = d.job_id if d.job_id is not None else d.details.get("at")
        actions.append(Action(
            kind="drain", decision=decision, node=d.node, job_id=d.job_id, reason=d.reason,
            key=derive_key("daemon.drain", d.node, d.kind, cause), details=dict(d.details)))

    actions += repair_actions(cfg, obs, actions, skip_nodes=seen)
    return Plan(now=now, cycle=now, fair=cycle.standings, site_factors=targets,
                changed=changed, actions=tuple(actions),
                snapshots=snapshots(cycle.standings, now, cycle.lane),
                wake_at=tuple(preempt_grace.grace_ends(now, jobs)),
                starved=starved_waits(now, queue, cycle.positions, room,
                                      cfg.policy.contracts))


def repairs_of(cfg: Config, obs: Observation, planned: Sequence[Action] = ()) -> RepairPlan:
    """Repairs at the contract (``policy.repairs``) within what the preemption cap leaves
    after ``planned``; jobs ``planned`` already requeues or cancels are left out."""
    book = ledger(obs.history)
    used = [*book.recent, *((obs.now, a.gpus) for a in planned
                            if a.kind == "requeue" and a.decision != "lane_requeue")]
    left = preemption_budget_left(obs.now, PreemptionLedger(book.last_requeue, used),
                                  cfg.total_gpus(), cfg.policy.contracts)
    skip = {a.job_id for a in planned if a.kind in ("requeue", "cancel") and a.job_id}
    return plan_repairs(obs.now, obs.nodes, obs.jobs,
                        current_findings(node_events(obs.health)), cfg, budget_left=left,
                        breaker=obs.breaker, skip_jobs=skip)


def repair_actions(cfg: Config, obs: Observation, planned: Sequence[Action], *,
                   skip_nodes: Collection[str] = ()) -> list[Action]:
    """The owned drains and requeues of repairs at the contract, as actions."""
    rp = repairs_of(cfg, obs, planned)
    out = [Action(kind="drain", decision="drain", node=d.node, reason=d.reason,
                  key=derive_key("daemon.repair_drain", d.node, d.first_seen),
                  details={"checks": list(d.checks), "breaker": d.breaker,
                           "hook": "daemon", "repair": True})
           for d in rp.drains if d.node not in skip_nodes]
    out += [Action(kind="requeue", decision="repair_requeue", job_id=r.job_id, gpus=r.gpus,
                   reason=r.reason, key=derive_key("daemon.repair_requeue", r.job_id, r.start),
                   details={**r.details, "gpus": r.gpus})
            for r in rp.requeues]
    return out
