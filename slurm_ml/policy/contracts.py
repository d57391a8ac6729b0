"""Scheduling contracts: time slicing by requeue, so that fair share converges.

Slurm preempts by QOS tier, never by fair share (research §1.6), so a week-long job of an
over-served allocation would otherwise hold its GPUs while an under-served one waits. The
contract (Ai2, docs/design.md): a job's minimum runtime is protected; after it, a *resumable*
allocated job of an over-served allocation may be requeued for a *starved* job of an
under-served one. Guards, each from a system that learned it the hard way:

* hysteresis: the victim's delivered/owed exceeds the preemptor's by ``preempt_min_gap``
  (HTCondor's "20 % better priority" against thrashing);
* loop-free: the preemptor's point-in-time share after the swap is at most the victim's
  (Kueue ``LessThanOrEqualToFinalShare``), so two allocations can never requeue each other
  back and forth;
* the victims that lose the least work, GPU-hours, first (Hadoop: youngest first), ties
  from the most over-served allocation;
* a preemption budget: a per-job cooldown and a cluster cap of
  ``floor(preempt_cap_fraction x total GPUs)`` GPUs per ``preempt_cap_window_s``.

Entitlement first (``reclaim_entitlement``, Kueue's reclaim of borrowed quota; Ai2's
owed counts each hour): an allocation running below its entitlement now (budget share x
capacity) is also eligible, whatever its ratio, and may take jobs of one running above
its own entitlement, whatever their ratios and the gap; loop-free, the cooldown and the
cap still apply. With it on, no requeue by either rule leaves its victim's allocation
below its entitlement (``keeps_entitlement``).

Small clusters: the cap is a floor, so at the defaults (5 % per 10 min) a 40-GPU cluster
may requeue at most 2 GPUs per 10 min, which means a starved job needing more than 2 GPUs
beyond the free ones is never served by requeue there, and a cluster under 20 GPUs never
requeues at all. Raise ``preempt_cap_fraction`` on small clusters (0.2 on 40 GPUs allows
one 8-GPU swap per window).

Room is planned node by node (``policy.placement``): a job is starved only if it cannot
be placed now, and only victims whose GPUs complete a placement for it are requeued, the
set losing the fewest GPU-hours first. Freed GPUs are assumed to go to the starved job
(it ranks first by SiteFactor). Free-QOS jobs are never victims here: Slurm's
preempt/qos handles them, and their GPUs count as room.

Pure: ``now`` (epoch seconds), the jobs, positions and history come in as values.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_ml.config import ContractsConfig
from slurm_ml.model import ALLOC_QOS
from slurm_ml.policy import pending
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.fairshare import FairShare
from slurm_ml.policy.placement import NodeMap, Placement, Planner, fits_now

#: Slurm's codes for "would start if GPUs were free" (slurm_ml.policy.pending, the list
#: fair share's demand uses too): holds, dependencies, begin times, association/QOS
#: limits, nodes down, drained or reserved, reservations and licences are excluded, and
#: so is a job Slurm has not evaluated yet (demand, but no reason to requeue anyone).
STARVED_REASONS = frozenset(r.code for r in pending.REASONS
                            if r.wait in pending.STARVING_WAITS)

#: Float slack for share and ratio comparisons (1.15 - 0.95 < 0.2 in floats).
_EPS = 1e-9

#: An allocation no real one can be more deserving than: nothing delivered, nothing running.
_PROBE = "\0probe"


@dataclass(frozen=True, slots=True)
class AllocationPosition:
    """Where an allocation (project account) stands now."""

    account: str
    budget_share: float  # fraction of the cluster
    ratio: float | None  # window delivered/owed; None = nothing owed
    running_billing_gpus: float  # billing GPUs of its alloc jobs running now
    #: budget share x capacity, billing GPUs (None: unknown, neither below nor above it)
    entitled_billing_gpus: float | None = None

    @property
    def below_entitlement(self) -> bool:
        """Running less than its entitlement now: what Ai2's owed counts hour by hour."""
        entitled = self.entitled_billing_gpus
        return entitled is not None and self.running_billing_gpus < entitled - _EPS

    @property
    def above_entitlement(self) -> bool:
        """Running more than its entitlement now: borrowing other allocations' share."""
        entitled = self.entitled_billing_gpus
        return entitled is not None and self.running_billing_gpus > entitled + _EPS

    @property
    def share(self) -> float:
        """Point-in-time share: running billing GPUs per unit of budget (inf without one)."""
        if self.budget_share <= 0:
            return math.inf
        return self.running_billing_gpus / self.budget_share


@dataclass(frozen=True, slots=True)
class PreemptionLedger:
    """What slurm-ml requeued before (from the audit log)."""

    last_requeue: Mapping[int, int]  # job id -> epoch of slurm-ml's last requeue of it
    recent: Sequence[tuple[int, int]]  # (epoch, gpus) of slurm-ml requeues
    #: (epoch, gpus) of the fast lane's requeues: their own cap (``policy.lane_requeue``)
    lane_recent: Sequence[tuple[int, int]] = ()


@dataclass(frozen=True, slots=True)
class Requeue:
    """Requeue ``victim`` so that ``for_job`` can start."""

    victim: int
    for_job: int
    victim_account: str
    for_account: str
    gpus: int
    reason: str  # one human sentence an operator and the victim's owner can read
    details: dict[str, object]  # JSON-able: ratios, shares before/after, waited_s, ran_s, ...


def preemption_cap(total_gpus: int, cfg: ContractsConfig) -> int:
    """GPUs slurm-ml may requeue per window: a floor, so small clusters may get 0."""
    return max(0, math.floor(cfg.preempt_cap_fraction * total_gpus))


def preemption_budget_left(now: int, ledger: PreemptionLedger, total_gpus: int,
                           cfg: ContractsConfig) -> int:
    """GPUs that may still be requeued now: the cap less the requeues in the window."""
    used = sum(g for at, g in ledger.recent if now - at < cfg.preempt_cap_window_s)
    return max(0, preemption_cap(total_gpus, cfg) - used)


def loop_free(preemptor: AllocationPosition, need_billing: float, victim: AllocationPosition,
              victim_billing: float) -> bool:
    """Kueue's LessThanOrEqualToFinalShare on point-in-time shares: after the swap the
    preemptor's share, (run_p + need_p)/w_p, is at most the victim's, (run_v - b_v)/w_v.

    Then the reverse swap would need the victim's share plus a positive amount to be at
    most the preemptor's share minus a positive amount, which cannot hold: no ping-pong.
    """
    if preemptor.budget_share <= 0 or victim.budget_share <= 0:
        return False
    after_p = (preemptor.running_billing_gpus + need_billing) / preemptor.budget_share
    after_v = (victim.running_billing_gpus - victim_billing) / victim.budget_share
    return after_p <= after_v + _EPS


def billing_by_account(jobs: Iterable[RunningJob]) -> dict[str, float]:
    """Billing GPUs of ``jobs`` per account: what a set of victims takes from each."""
    out: dict[str, float] = {}
    for j in jobs:
        out[j.account] = out.get(j.account, 0.0) + j.billing_gpus
    return out


def keeps_entitlement(victim: AllocationPosition, taken_billing: float,
                      cfg: ContractsConfig) -> bool:
    """With ``contracts.reclaim_entitlement`` no requeue, by either rule, leaves an
    allocation below its entitlement: losing ``taken_billing`` keeps it at or above it
    (an unknown entitlement sets no floor). So a requeue never makes its victim's
    allocation below its entitlement, and it never reclaims back."""
    entitled = victim.entitled_billing_gpus
    return (not cfg.reclaim_entitlement or entitled is None
            or victim.running_billing_gpus - taken_billing >= entitled - _EPS)


def reclaims(preemptor: AllocationPosition, victim: AllocationPosition,
             cfg: ContractsConfig, taken_billing: float = 0.0) -> bool:
    """``contracts.reclaim_entitlement``: the preemptor runs below its entitlement now and
    the victim above its own, whatever their window ratios (Kueue's reclaim of borrowed
    quota), and losing ``taken_billing`` leaves the victim's allocation at or above its
    entitlement (``keeps_entitlement``: only borrowed GPUs are reclaimed). The loop-free
    rule still applies."""
    return (cfg.reclaim_entitlement and preemptor.below_entitlement
            and victim.above_entitlement and victim.entitled_billing_gpus is not None
            and keeps_entitlement(victim, taken_billing, cfg))


def _window_allows(preemptor: AllocationPosition, victim: AllocationPosition,
                   cfg: ContractsConfig) -> bool:
    """The window rules: the preemptor under-served, the victim over-served and ahead of
    it by the gap."""
    v_ratio, p_ratio = victim.ratio, effective_ratio(preemptor)
    return (v_ratio is not None and v_ratio > 1 + _EPS and p_ratio is not None
            and p_ratio < 1 - _EPS and v_ratio - p_ratio >= cfg.preempt_min_gap - _EPS)


def effective_ratio(pos: AllocationPosition) -> float | None:
    """delivered/owed for comparisons: nothing owed but a budget counts as 0 (it is
    demanding now and has had nothing); no budget counts as unknown (None)."""
    if pos.ratio is not None:
        return pos.ratio
    return 0.0 if pos.budget_share > 0 else None


def starving_reason(reason: str) -> bool:
    """Whether a pending reason is one that freeing GPUs can end (see STARVED_REASONS);
    a maintenance reservation never is, whatever code it comes with (policy.pending
    reads it as ReqNodeNotAvail)."""
    return pending.starving(reason)


def protected_s(job: RunningJob, cfg: ContractsConfig) -> int:
    """The run time a job is protected for: its --time-min, capped; unknown = the cap."""
    cap = cfg.min_runtime_cap_min * 60
    return cap if job.time_min_s is None else min(job.time_min_s, cap)


def _fmt_ratio(ratio: float | None) -> str:
    return "nothing owed yet" if ratio is None else f"delivered/owed {ratio:.2f}"


@dataclass(slots=True)
class _State:
    """What a plan has changed so far: the next decision sees it."""

    positions: dict[str, AllocationPosition]
    planner: Planner
    budget_left: int
    accounts: _VictimAccounts


class _VictimAccounts:
    """The victims' allocations by delivered/owed, so that a job no victim's allocation
    may be requeued for (the gap, and the loop-free rule for its smallest victim) is
    ruled out before any node is searched. A necessary condition only: the victims
    themselves still pass ``victim_blocker``."""

    def __init__(self, pool: Sequence[RunningJob], cfg: ContractsConfig) -> None:
        self.cfg = cfg
        self.min_billing: dict[str, float] = {}
        for v in pool:
            self.min_billing[v.account] = min(self.min_billing.get(v.account, math.inf),
                                               v.billing_gpus)
        self.ratios: list[float] = []
        self.rows: list[tuple[str, float]] = []  # (account, share after its smallest victim)
        self.best_after: list[float] = []  # suffix maxima of the shares after
        self.above: list[tuple[str, float]] = []  # above entitlement: (account, share after)

    def refresh(self, positions: Mapping[str, AllocationPosition]) -> None:
        rows = []
        self.above = []
        for a, b in self.min_billing.items():
            p = positions.get(a)
            if p is None or p.budget_share <= 0:
                continue
            after = (p.running_billing_gpus - b) / p.budget_share
            if p.ratio is not None and keeps_entitlement(p, b, self.cfg):
                rows.append((p.ratio, a, after))
            if p.above_entitlement and keeps_entitlement(p, b, self.cfg):
                self.above.append((a, after))  # its smallest victim is borrowed GPUs
        rows.sort()
        self.ratios = [r for r, _, _ in rows]
        self.rows = [(a, after) for _, a, after in rows]
        best, top = [0.0] * len(rows), -math.inf
        for i in range(len(rows) - 1, -1, -1):
            top = max(top, rows[i][2])
            best[i] = top
        self.best_after = best

    def allowed(self, ppos: AllocationPosition, need_billing: float,
                cfg: ContractsConfig) -> list[str]:
        """The allocations that may lose a job to this one."""
        p_ratio = effective_ratio(ppos)
        if p_ratio is None or ppos.budget_share <= 0:
            return []
        after_p = (ppos.running_billing_gpus + need_billing) / ppos.budget_share
        out: list[str] = []
        if cfg.reclaim_entitlement and ppos.below_entitlement:  # ``reclaims``
            out = [a for a, after in self.above if after >= after_p - _EPS
                   and a != ppos.account]
        if p_ratio >= 1 - _EPS:  # the window rules need it under-served
            return out
        i = bisect_left(self.ratios, max(1 + _EPS, p_ratio + cfg.preempt_min_gap - _EPS))
        while i < len(self.ratios) and self.ratios[i] <= 1 + _EPS:
            i += 1
        if i >= len(self.ratios) or self.best_after[i] < after_p - _EPS:
            return out
        taken = set(out)
        return out + [a for a, after in self.rows[i:] if after >= after_p - _EPS
                      and a != ppos.account and a not in taken]


def _eligible(now: int, job: WaitingJob, pos: AllocationPosition | None,
              cfg: ContractsConfig) -> bool:
    """An allocated job of an under-served allocation (or, with ``reclaim_entitlement``,
    of one below its entitlement now) that has waited long enough for a reason freed
    GPUs can end."""
    return job_may_starve(now, job, cfg) and account_may_starve(pos, cfg)


def account_may_starve(pos: AllocationPosition | None, cfg: ContractsConfig) -> bool:
    """The allocation's part of ``_eligible``, the same for all of its jobs: one with a
    budget, under-served (or, with ``reclaim_entitlement``, below its entitlement now)."""
    if pos is None or pos.budget_share <= 0:
        return False
    if not (cfg.reclaim_entitlement and pos.below_entitlement):
        ratio = effective_ratio(pos)
        if ratio is None or ratio >= 1 - _EPS:  # exactly served, up to float noise
            return False
    return True


def job_may_starve(now: int, job: WaitingJob, cfg: ContractsConfig) -> bool:
    """The job's own part of ``_eligible``: allocated work asking for GPUs that has waited
    long enough, for a reason freed GPUs can end."""
    return (job.qos == ALLOC_QOS and job.gpus > 0
            and now - job.submit >= cfg.preempt_after_wait_s and starving_reason(job.reason))


def is_starved(now: int, job: WaitingJob, pos: AllocationPosition | None,
               nodes: NodeMap, cfg: ContractsConfig) -> bool:
    """An eligible job (``_eligible``) that cannot be placed on the room ``nodes`` have
    now (``{}``: no room anywhere)."""
    return _eligible(now, job, pos, cfg) and not fits_now(job.gpus, job.gpu_types, nodes)


def victim_blocker(now: int, victim: RunningJob, for_job: WaitingJob, *,
                   positions: Mapping[str, AllocationPosition], ledger: PreemptionLedger,
                   cfg: ContractsConfig) -> str | None:
    """Why ``victim`` may not be requeued for ``for_job`` (None = it may)."""
    own = _job_blocker(now, victim, for_job, ledger=ledger, cfg=cfg)
    if own is not None:
        return own
    return _allocation_blocker(positions.get(victim.account), positions.get(for_job.account),
                               victim.billing_gpus, for_job.billing_gpus, cfg)


def _job_blocker(now: int, victim: RunningJob, for_job: WaitingJob, *,
                 ledger: PreemptionLedger, cfg: ContractsConfig) -> str | None:
    """``victim_blocker``'s reasons of the two jobs themselves: the kind of work, its GPU
    type, its protection and its cooldown."""
    if victim.qos != ALLOC_QOS:
        return "not allocated work (free-QOS jobs are preempted by Slurm itself)"
    if not victim.requeue:
        return "not resumable (submitted with --no-requeue)"
    if not victim.batch:
        return "interactive session"
    if victim.gpus <= 0 or not for_job.accepts(victim.gpu_type):
        return "GPU type not acceptable to the waiting job"
    if victim.ran_s(now) < protected_s(victim, cfg):
        return "inside its protected minimum runtime"
    last = ledger.last_requeue.get(victim.job_id)
    if last is not None and now - last < cfg.requeue_cooldown_s:
        return "requeued by slurm-ml within the cooldown"
    return None


def _allocation_blocker(vpos: AllocationPosition | None, ppos: AllocationPosition | None,
                        victim_billing: float, for_billing: float,
                        cfg: ContractsConfig) -> str | None:
    """``victim_blocker``'s reasons of the two allocations: their positions, and the
    billing GPUs the requeue moves between them (the same for any two jobs of theirs of
    those sizes)."""
    if vpos is None or ppos is None or vpos.account == ppos.account:
        return "no budget position"
    v_ratio, p_ratio = vpos.ratio, effective_ratio(ppos)
    if not keeps_entitlement(vpos, victim_billing, cfg):
        return "its allocation would fall below its entitlement without it"
    if reclaims(ppos, vpos, cfg, victim_billing):
        if not loop_free(ppos, for_billing, vpos, victim_billing):
            return "the waiting allocation would end above the victim's share (loop-free rule)"
        return None
    if v_ratio is None or v_ratio <= 1 + _EPS:  # 1.0000000000000002 is served, not over
        if cfg.reclaim_entitlement:
            return ("its allocation is not over-served, and no reclaim applies (the waiting "
                    "allocation is not below its entitlement, or this one not above its own)")
        return "its allocation is not over-served"
    if cfg.reclaim_entitlement and (p_ratio is None or p_ratio >= 1 - _EPS):
        return ("the waiting allocation is neither under-served nor, with this victim, "
                "reclaiming GPUs borrowed beyond an entitlement")
    if p_ratio is None or v_ratio - p_ratio < cfg.preempt_min_gap - _EPS:
        return "delivered/owed gap below preempt_min_gap"
    if not loop_free(ppos, for_billing, vpos, victim_billing):
        return "the waiting allocation would end above the victim's share (loop-free rule)"
    return None


def _shift(positions: dict[str, AllocationPosition], account: str, delta: float) -> None:
    pos = positions[account]
    positions[account] = replace(pos, running_billing_gpus=pos.running_billing_gpus + delta)


def _option(now: int, job: WaitingJob, *, ledger: PreemptionLedger, state: _State,
            cfg: ContractsConfig) -> Placement | None:
    """Where ``job`` would start after the requeues that lose the fewest GPU-hours, each
    victim allowed by ``victim_blocker`` and all of them together by the loop-free rule
    on the victims' final shares; None unless a placement is completed within budget."""
    positions = state.positions
    ppos = positions[job.account]
    accounts = state.accounts.allowed(ppos, job.billing_gpus, cfg)
    if accounts == []:
        return None
    allowed = set(accounts)
    verdicts: dict[int, bool] = {}

    def can_take(victim: RunningJob) -> bool:
        got = verdicts.get(victim.job_id)
        if got is None:
            got = victim.account in allowed and victim_blocker(
                now, victim, job, positions=positions, ledger=ledger, cfg=cfg) is None
            verdicts[victim.job_id] = got
        return got

    def set_ok(victims: Sequence[RunningJob]) -> bool:
        billing = billing_by_account(victims)
        return all(loop_free(ppos, job.billing_gpus, positions[a], b)
                   and keeps_entitlement(positions[a], b, cfg)  # all its victims together
                   and (_window_allows(ppos, positions[a], cfg)
                        or reclaims(ppos, positions[a], cfg, b))
                   for a, b in billing.items())

    return state.planner.best(job.gpus, job.gpu_types, can_take=can_take, set_ok=set_ok,
                              budget=state.budget_left, only=state.planner.nodes_of(allowed))


def _describe(now: int, victim: RunningJob, job: WaitingJob, *,
              before: Mapping[str, AllocationPosition], after: Mapping[str, AllocationPosition],
              opt: Placement, free_before: int, state: _State,
              cfg: ContractsConfig) -> Requeue:
    vb, va = before[victim.account], after[victim.account]
    pb, pa = before[job.account], after[job.account]
    guard = protected_s(victim, cfg)
    runtime = (f"its {guard // 60}-min minimum runtime" if victim.time_min_s is not None
               else f"{guard // 60} min (the cap: slurm-ml has no record of its protection)")
    basis = "window" if _window_allows(pb, vb, cfg) else "entitlement"
    if basis == "entitlement":
        reason = (f"requeued after {runtime} so that job {job.job_id} of {job.account} can "
                  f"start: {job.account} runs {pb.running_billing_gpus:.1f} of its "
                  f"{pb.entitled_billing_gpus or 0:.1f} entitled billing GPUs, "
                  f"{victim.account} runs {vb.running_billing_gpus:.1f}, above its "
                  f"{vb.entitled_billing_gpus or 0:.1f}")
    else:
        reason = (f"requeued after {runtime} so that job {job.job_id} of {job.account} "
                  f"({_fmt_ratio(pb.ratio)}) can start; {victim.account} is over-served "
                  f"({_fmt_ratio(vb.ratio)})")
    details: dict[str, object] = {
        "victim_ratio": vb.ratio, "for_ratio": pb.ratio,
        "victim_share_before": vb.share, "victim_share_after": va.share,
        "for_share_before": pb.share, "for_share_after": pa.share,
        "victim_budget_share": vb.budget_share, "for_budget_share": pb.budget_share,
        "waited_s": now - job.submit, "ran_s": victim.ran_s(now), "protected_s": guard,
        "gpu_type": opt.gpu_type, "victim_billing_gpus": victim.billing_gpus,
        "for_billing_gpus": job.billing_gpus, "for_gpus": job.gpus,
        "nodes": list(opt.nodes), "free_gpus_before": free_before, "plan_gpus": opt.gpus,
        "lost_gpu_h": round(opt.lost_gpu_h, 3),
        "budget_left_before": state.budget_left, "min_gap": cfg.preempt_min_gap,
        "basis": basis, "victim_entitled_gpus": vb.entitled_billing_gpus,
        "for_entitled_gpus": pb.entitled_billing_gpus,
    }
    return Requeue(victim=victim.job_id, for_job=job.job_id, victim_account=victim.account,
                   for_account=job.account, gpus=victim.gpus, reason=reason, details=details)


def probe_job(submit: int) -> WaitingJob:
    """The most deserving waiting job there can be, waiting since ``submit``: of an
    allocation with nothing delivered or running (``_PROBE``), alloc, one GPU of any type,
    waiting for resources."""
    return WaitingJob(job_id=-1, account=_PROBE, user=_PROBE, qos=ALLOC_QOS, gpus=1,
                      gpu_types=frozenset(), billing_gpus=0.0, submit=submit,
                      reason="Resources", order=-1)


def requeueable(now: int, running: Iterable[RunningJob],
                positions: Mapping[str, AllocationPosition], ledger: PreemptionLedger,
                cfg: ContractsConfig) -> list[RunningJob]:
    """The running jobs requeueable for someone: one blocked (``victim_blocker``) for
    the most deserving preemptor there can be (``probe_job``: ratio 0, nothing running,
    needing one GPU of any type) is blocked for every real one, because the gap and the
    loop-free rule only get harder and the other reasons do not depend on the preemptor."""
    probe = probe_job(now)
    ppos = AllocationPosition(_PROBE, 1.0, 0.0, 0.0, math.inf)
    # ``victim_blocker`` for the probe; its allocations' part once per account and size
    fine: dict[tuple[str, float], bool] = {}
    out: list[RunningJob] = []
    for r in running:
        if _job_blocker(now, r, probe, ledger=ledger, cfg=cfg) is not None:
            continue
        key = (r.account, r.billing_gpus)
        ok = fine.get(key)
        if ok is None:
            ok = fine[key] = _allocation_blocker(positions.get(r.account), ppos,
                                                 r.billing_gpus, probe.billing_gpus,
                                                 cfg) is None
        if ok:
            out.append(r)
    return out


def plan_requeues(  # noqa: PLR0917  (the daemon's call shape: one value per input)
        now: int, running: Sequence[RunningJob], waiting: Sequence[WaitingJob],
        positions: Mapping[str, AllocationPosition], ledger: PreemptionLedger,
        nodes: NodeMap, total_gpus: int, cfg: ContractsConfig, *,
        in_order: bool = False, pool_given: bool = False) -> list[Requeue]:
    """Requeues that let starved jobs start, in scheduling order, within the budget.

    ``nodes`` is the room node by node (``placement.node_slots`` over every running job);
    ``running`` the jobs that may be victims. A job that can be placed now is not
    starved; a starved one is served by the placement whose victims lose the fewest
    GPU-hours, or not at all (then the next starved job is considered). Positions, the
    room and the budget are updated after each job so that later decisions see them.
    ``in_order``: ``waiting`` is in scheduling order already and ``order`` is not read
    (the simulator's starved jobs, taken from its sorted queue). ``pool_given``:
    ``running`` is ``requeueable(now, running, positions, ledger, cfg)`` already (the
    simulator narrows it first), so it is not filtered a second time.
    """
    budget_left = preemption_budget_left(now, ledger, total_gpus, cfg)
    if budget_left <= 0:
        return []
    pool = list(running) if pool_given else requeueable(now, running, positions, ledger, cfg)
    # equally costly victims: the most over-served allocation's first
    planner = Planner(now, nodes, pool,
                      prefer=lambda v: -(p.ratio or 0.0) if (p := positions.get(v.account))
                      else 0.0)
    state = _State(positions=dict(positions), planner=planner, budget_left=budget_left,
                   accounts=_VictimAccounts(pool, cfg))
    state.accounts.refresh(state.positions)
    out: list[Requeue] = []
    # (account, GPUs, types, billing) -> the planner version it found nothing at
    failed: dict[tuple[str, int, frozenset[str], float], int] = {}
    # account -> ``account_may_starve`` on ``state.positions``, until a requeue moves them
    may: dict[str, bool] = {}
    for job in waiting if in_order else sorted(waiting, key=lambda w: (w.order, w.job_id)):
        if state.budget_left <= 0:
            break
        # Asked first because it is the cheapest: the same question as a job before it,
        # and nothing has changed (the job would be passed over whatever came next).
        same = (job.account, job.gpus, job.gpu_types, job.billing_gpus)
        if failed.get(same) == planner.version:
            continue
        ok = may.get(job.account)
        if ok is None:
            ok = may[job.account] = account_may_starve(state.positions.get(job.account), cfg)
        if not ok or not job_may_starve(now, job, cfg):  # ``_eligible``, account part kept
            continue
        fits, least = planner.room(job.gpus, job.gpu_types)
        if fits or least > state.budget_left:
            continue
        best = _option(now, job, ledger=ledger, state=state, cfg=cfg)
        if best is None:
            failed[same] = planner.version
            continue
        free_before = sum(planner.free[n] for n in best.nodes)
        before = dict(state.positions)
        for victim in best.victims:
            _shift(state.positions, victim.account, -victim.billing_gpus)
        _shift(state.positions, job.account, job.billing_gpus)
        out.extend(_describe(now, v, job, before=before, after=state.positions, opt=best,
                             free_before=free_before, state=state, cfg=cfg)
                   for v in best.victims)
        planner.commit(best, job.gpus)
        state.accounts.refresh(state.positions)
        may.clear()
        state.budget_left -= best.gpus
    return out


def after_requeues(positions: Mapping[str, AllocationPosition],
                   requeues: Sequence[Requeue]) -> dict[str, AllocationPosition]:
    """The positions once ``requeues`` (a plan's) are done: each victim's billing GPUs
    leave its allocation and the job it was requeued for counts once for its own."""
    out = dict(positions)
    started: set[int] = set()
    for rq in requeues:
        if rq.victim_account in out:
            _shift(out, rq.victim_account, -_number(rq.details.get("victim_billing_gpus")))
        if rq.for_account in out and rq.for_job not in started:
            started.add(rq.for_job)
            _shift(out, rq.for_account, _number(rq.details.get("for_billing_gpus")))
    return out


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def allocation_positions(fair: FairShare, running: Sequence[RunningJob],
                         ) -> dict[str, AllocationPosition]:
    """Each project's position for the contracts: its budget share, window
    delivered/owed and entitlement from ``fair``, and the billing GPUs its alloc jobs
    hold now. The daemon
    and the simulator both build positions here."""
    load: dict[str, float] = {}
    for r in running:
        if r.qos == ALLOC_QOS:
            load[r.account] = load.get(r.account, 0.0) + r.billing_gpus
    return {s.account: AllocationPosition(account=s.account, budget_share=s.budget_share,
                                          ratio=s.ratio,
                                          running_billing_gpus=load.get(s.account, 0.0),
                                          entitled_billing_gpus=s.entitled_gpus)
            for s in fair.standings if s.kind == "project"}
