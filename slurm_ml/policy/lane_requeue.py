"""The fast lane's own requeues: room for a waiting debug job when nothing else frees it.

At 2-3x allocated demand the lane's SiteFactor alone is not enough: free-QOS work barely
runs (0.9% of the GPU time of a judged window in the simulator; docs/benchmarks-history.md,
"Scheduling outcomes: the targets table"), so Slurm's preempt/qos has nothing to requeue,
and a lane job waits for the next job end (up to minutes on a cluster of long jobs). Ai2's
debug jobs preempt work past their minimum runtime; so may a lane job here, after
``fast_lane.preempt_after_s``:

* victims are what the contracts' window rule may requeue for anyone
  (``contracts.requeueable``): allocated, resumable, batch work past its protected
  runtime, outside the cooldown, of an over-served allocation; never short work itself,
  so lane jobs cannot requeue each other; and with ``contracts.reclaim_entitlement``
  never so many that the allocation falls below its entitlement
  (``contracts.keeps_entitlement``, on the positions after the contracts' requeues);
* the set that loses the fewest GPU-hours, ties from the most over-served allocation
  (the contracts' planner, node by node);
* within a budget of its own: ``floor(fast_lane.preempt_cap_fraction x GPUs)`` per
  ``contracts.preempt_cap_window_s`` (``PreemptionLedger.lane_recent``), apart from the
  contracts' cap, so neither starves the other;
* oldest lane job first, as the lane itself is first come, first served.

No delivered/owed gap or loop-free rule between the two allocations: the lane job's own
allocation is not asked to be under-served (a debug job is short and capped, and the
lane's GPUs are charged to it like any other work), and a lane job is protected for
its run, so no swap can be undone by the victim's side.

Pure: ``now`` (epoch seconds), the jobs, positions and history come in as values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from slurm_ml.config import ContractsConfig, FastLaneConfig
from slurm_ml.policy import preempt_grace
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import (
    AllocationPosition,
    PreemptionLedger,
    Requeue,
    billing_by_account,
    keeps_entitlement,
    protected_s,
    requeueable,
    starving_reason,
)
from slurm_ml.policy.placement import NodeMap, Planner

__all__ = ["lane_budget_left", "lane_cap_gpus", "lane_requeues_on", "plan_lane_requeues",
           "wake_cycle_at", "wake_for", "wake_times", "wakes_on"]


def lane_cap_gpus(total_gpus: int, cfg: FastLaneConfig) -> int:
    """GPUs the lane may requeue per window: a floor, so 0 turns it off."""
    return max(0, math.floor(cfg.preempt_cap_fraction * total_gpus + 1e-9))


def wakes_on(cfg: FastLaneConfig) -> bool:
    """Whether a lane admission wakes the daemon (``wake_min_gap_s`` > 0): a cycle at
    the end of the grace Slurm gives the free work it preempts for the job finishes that
    preemption (:mod:`slurm_ml.policy.preempt_grace`), and with the lane's requeues on,
    a cycle can requeue for it."""
    return cfg.wake_min_gap_s > 0


def lane_requeues_on(cfg: FastLaneConfig, total_gpus: int) -> bool:
    """Whether the lane requeues allocated work of its own on a cluster of
    ``total_gpus``: its cap (``preempt_cap_fraction``, floored) is at least one GPU."""
    return lane_cap_gpus(total_gpus, cfg) > 0


def wake_for(admitted_at: float, cfg: FastLaneConfig) -> float:
    """When a cycle can first requeue for a job laned at ``admitted_at``: once it has
    waited ``preempt_after_s``, plus a second (Slurm's submit time and the daemon's
    clock are whole seconds)."""
    return admitted_at + cfg.preempt_after_s + 1


def wake_times(admitted_at: float, cfg: FastLaneConfig, free_grace_s: float,
               total_gpus: int) -> tuple[float, ...]:
    """The cycles a job laned at ``admitted_at`` asks for: when the grace of free work
    Slurm preempts for it ends (QOS free's GraceTime, ``free_grace_s``; Slurm preempts
    within a second or two of the submission, and a later start is caught by the cycle's
    own wake, ``Plan.wake_at``), and when the lane may requeue for it (only where its
    cap on ``total_gpus`` is a GPU or more: :func:`lane_requeues_on`)."""
    out = {admitted_at + preempt_grace.PREEMPT_DELAY_S + free_grace_s
           + preempt_grace.WAKE_SLACK_S}
    if lane_requeues_on(cfg, total_gpus):
        out.add(wake_for(admitted_at, cfg))
    return tuple(sorted(out))


def wake_cycle_at(wake: float, last_cycle_at: float | None, cfg: FastLaneConfig) -> float:
    """When a woken cycle runs: at ``wake``, but ``wake_min_gap_s`` after the last cycle
    at the earliest, so that wakes never run the daemon more often than that."""
    if last_cycle_at is None:
        return wake
    return max(wake, last_cycle_at + cfg.wake_min_gap_s)


def lane_budget_left(now: int, ledger: PreemptionLedger, total_gpus: int,
                     cfg: FastLaneConfig, ccfg: ContractsConfig) -> int:
    """GPUs the lane may still requeue now: its cap less its requeues in the window."""
    used = sum(g for at, g in ledger.lane_recent if now - at < ccfg.preempt_cap_window_s)
    return max(0, lane_cap_gpus(total_gpus, cfg) - used)


def plan_lane_requeues(  # noqa: PLR0917  (the daemon's call shape: one value per input)
        now: int, running: Sequence[RunningJob], lane_waiting: Sequence[WaitingJob],
        positions: Mapping[str, AllocationPosition], ledger: PreemptionLedger,
        nodes: NodeMap, total_gpus: int, cfg: FastLaneConfig, ccfg: ContractsConfig,
        short: Collection[int] = ()) -> list[Requeue]:
    """Requeues that let waiting lane jobs start, oldest first, within the lane's budget.

    ``lane_waiting``: the lane's pending members; ``nodes``: the room node by node
    (``placement.node_slots`` over every running job, after this cycle's other
    requeues); ``short``: ids of running short work (never a victim)."""
    budget_left = lane_budget_left(now, ledger, total_gpus, cfg, ccfg)
    if budget_left <= 0 or not lane_waiting:
        return []
    ready = [w for w in sorted(lane_waiting, key=lambda w: (w.submit, w.job_id))
             if now - w.submit >= cfg.preempt_after_s and starving_reason(w.reason)]
    if not ready:
        return []
    # victims of over-served allocations only (the window rule; the reclaim is the
    # contracts' own), and with reclaim_entitlement never below an entitlement: each
    # victim alone here, all of an allocation's together in ``set_ok``
    window = replace(ccfg, reclaim_entitlement=False)
    pool = [r for r in requeueable(now, running, positions, ledger, window)
            if r.job_id not in short
            and keeps_entitlement(positions[r.account], r.billing_gpus, ccfg)]
    if not pool:
        return []
    taken: dict[str, float] = {}  # billing GPUs requeued per allocation so far

    def set_ok(victims: Sequence[RunningJob]) -> bool:
        return all(keeps_entitlement(positions[a], taken.get(a, 0.0) + b, ccfg)
                   for a, b in billing_by_account(victims).items())

    planner = Planner(now, nodes, pool,
                      prefer=lambda v: -(p.ratio or 0.0) if (p := positions.get(v.account))
                      else 0.0)
    out: list[Requeue] = []
    for job in ready:
        if budget_left <= 0:
            break
        fits, least = planner.room(job.gpus, job.gpu_types)
        if fits:  # it starts in free room: later lane jobs must not count on that room
            place = planner.free_place(job.gpus, job.gpu_types)
            if place is not None:
                planner.commit(place, job.gpus)
            continue
        if least > budget_left:
            continue
        best = planner.best(job.gpus, job.gpu_types, can_take=_acceptable_to(job),
                            set_ok=set_ok, budget=budget_left)
        if best is None:
            continue
        for a, b in billing_by_account(best.victims).items():
            taken[a] = taken.get(a, 0.0) + b
        out.extend(_describe(now, v, job, positions=positions, lost_gpu_h=best.lost_gpu_h,
                             nodes=best.nodes, budget_left=budget_left, ccfg=ccfg)
                   for v in best.victims)
        planner.commit(best, job.gpus)
        budget_left -= best.gpus
    return out


def _acceptable_to(job: WaitingJob) -> Callable[[RunningJob], bool]:
    """A victim must hold GPUs of a type the lane job accepts."""
    return lambda v: job.accepts(v.gpu_type)


def _describe(now: int, victim: RunningJob, job: WaitingJob, *,
              positions: Mapping[str, AllocationPosition], lost_gpu_h: float,
              nodes: Sequence[str], budget_left: int, ccfg: ContractsConfig) -> Requeue:
    vpos = positions.get(victim.account)
    ratio = vpos.ratio if vpos is not None else None
    guard = protected_s(victim, ccfg)
    waited = now - job.submit
    shown = f"{ratio:.2f}" if ratio is not None else "unknown"
    reason = (f"requeued after its {guard // 60}-min minimum runtime so that fast-lane job "
              f"{job.job_id} of {job.account} (short work, waiting {waited} s) can start; "
              f"{victim.account} is over-served (delivered/owed {shown})")
    details: dict[str, object] = {
        "lane": True, "victim_ratio": ratio, "waited_s": waited, "ran_s": victim.ran_s(now),
        "protected_s": guard, "for_gpus": job.gpus, "nodes": list(nodes),
        "lost_gpu_h": round(lost_gpu_h, 3), "lane_budget_left_before": budget_left,
    }
    return Requeue(victim=victim.job_id, for_job=job.job_id, victim_account=victim.account,
                   for_account=job.account, gpus=victim.gpus, reason=reason, details=details)
