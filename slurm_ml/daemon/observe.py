"""Observe: one consistent read of Slurm and the store per cycle, as plain values.

Everything the plan needs is read here and nowhere else, so ``plan`` stays pure and a
cycle that cannot read something fails before it decides anything. Slurm being
unreachable raises ``SlurmError``; the store being unreachable raises ``StoreError``:
the loop backs off and acts on nothing in both cases.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from slurm_ml.config import Config
from slurm_ml.daemon import repair_view, views
from slurm_ml.model import Job, JobState, JobUsage, Node
from slurm_ml.policy.reclaim import ORPHAN_CHECK
from slurm_ml.policy.refunds import FaultDrain
from slurm_ml.policy.repairs import BreakerView, current_findings, plan_repairs
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.protocol import Store
from slurm_ml.store.records import HealthEvent, ReconcilerDecision, UtilSample

log = logging.getLogger(__name__)

ACTIVE = frozenset({JobState.PENDING, JobState.RUNNING, JobState.COMPLETING,
                    JobState.SUSPENDED})
#: Decision kinds the daemon reads back: its own requeues and zombie warnings.
HISTORY_KINDS = ("requeue", "lane_requeue", "zombie_warn", "zombie_requeue", "zombie_cancel",
                 "repair_requeue", "requeue_signal")  # signals: plan.ledger


@dataclass(frozen=True, slots=True)
class Observation:
    """What one cycle saw. ``now`` is epoch seconds; everything else is as read."""

    now: int
    jobs: tuple[Job, ...]  # pending, running, completing
    nodes: tuple[Node, ...]
    usage: tuple[JobUsage, ...]  # slurmdbd, clipped to the window
    runaway: frozenset[int]
    samples: Mapping[int, tuple[UtilSample, ...]]  # running jobs' GPU samples, by job
    history: tuple[ReconcilerDecision, ...]  # its own applied decisions (requeues, warnings)
    orphans: tuple[HealthEvent, ...]
    #: repairs at the contract: the last hour's health events (findings and passes), and
    #: the breakers' inputs when a node with a finding must be drained first (None:
    #: nothing to drain, so the repairs decide no drain)
    health: tuple[HealthEvent, ...] = ()
    breaker: BreakerView | None = None
    #: the breakers' inputs as this cycle read them, for the metrics (``daemon.gauges``)
    breakers: BreakerView | None = None
    #: fault refunds: slurm-ml's drains in the window, and the refunds already recorded
    drains: tuple[FaultDrain, ...] = ()
    refunded: frozenset[str] = frozenset()  # keys of the refund decisions already applied


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def with_fault_drains(cfg: Config, store: Store, obs: Observation) -> Observation:
    """``obs`` with the window's slurm-ml drains and recorded refunds (fault refunds:
    ``budget status`` reads them too, so that it charges what the daemon charges)."""
    since = _at(obs.now - int(cfg.policy.fairshare.window_hours * 3600))
    decided = [d for d in store.decisions_since(since, kinds=["refund", "repair_requeue"])
               if not d.dry_run]
    drains = (*views.fault_drains(e for e in store.audit_entries(since=since)
                                  if e.action == "drain"),
              *views.repair_drains(decided))
    done = frozenset(d.idempotency_key for d in decided if d.kind == "refund")
    return replace(obs, drains=drains, refunded=done)


def observe(cfg: Config, slurm: SlurmClient, store: Store | None, now: int) -> Observation:
    """Read everything a cycle decides on. Without a store only Slurm is read
    (``budget status`` and ``why`` need no history)."""
    window_s = int(cfg.policy.fairshare.window_hours * 3600)
    jobs = tuple(j for j in slurm.list_jobs() if j.state in ACTIVE)
    nodes = tuple(slurm.list_nodes())
    try:
        runaway = frozenset(slurm.list_runaway_jobs())
    except SlurmError:
        if store is not None:
            raise
        # budget status / why as a user without sacctmgr operator rights: go on without
        log.info("event=runaway_list_unavailable (not excluded from usage)")
        runaway = frozenset()
    usage = tuple(u for u in slurm.job_usage(now - window_s, now) if u.job_id not in runaway)
    if store is None:
        return Observation(now, jobs, nodes, usage, runaway, {}, (), ())
    running = [j for j in jobs if j.state == JobState.RUNNING and j.start_time]
    samples: dict[int, list[UtilSample]] = {}
    if running:
        rc = cfg.policy.reclaim
        since = now - int(rc.zombie_heartbeat_s * 2)
        for s in store.util_samples_since(_at(since), job_ids=[j.job_id for j in running]):
            samples.setdefault(s.job_id, []).append(s)
    oldest = min((j.start_time or now for j in running), default=now)
    lookback = max(cfg.policy.contracts.requeue_cooldown_s,
                   cfg.policy.contracts.preempt_cap_window_s)
    since = min(now - int(lookback), oldest)
    history = tuple(d for d in store.decisions_since(_at(since), kinds=HISTORY_KINDS)
                    if not d.dry_run)
    orphans = tuple(store.health_events_since(
        _at(now - cfg.policy.reclaim.orphan_lookback_s), check_ids=[ORPHAN_CHECK]))
    health = tuple(store.health_events_since(_at(now - repair_view.LOOKBACK_S), limit=100_000))
    # The whole audit log, as every periodic health check reads it: open alarms and
    # resets may be old. The metrics show the breakers every cycle.
    breakers = repair_view.breaker_view(cfg, store.audit_entries(), nodes, _at(now))
    obs = Observation(now, jobs, nodes, usage, runaway,
                      {k: tuple(v) for k, v in samples.items()}, history, orphans, health,
                      _breaker(cfg, jobs, nodes, breakers, health=health, now=now), breakers)
    return with_fault_drains(cfg, store, obs)


def _breaker(cfg: Config, jobs: tuple[Job, ...], nodes: tuple[Node, ...],
             breakers: BreakerView, *, health: tuple[HealthEvent, ...],
             now: int) -> BreakerView | None:
    """The breakers' inputs for the repairs, only when a node with a finding and jobs on
    it is not drained yet: the cycle drains it first."""
    found = current_findings(repair_view.node_events(health))
    if all(r.drained for r in plan_repairs(now, nodes, jobs, found, cfg).nodes):
        return None
    return breakers
