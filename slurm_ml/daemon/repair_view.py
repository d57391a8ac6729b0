"""What repairs at the contract read, as ``policy.repairs`` values: the health events of
the last hour as ``NodeEvent``, and the breakers' inputs from the audit log and Slurm
(through ``store.audit_log``, the readers ``hooks.breaker`` uses too)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from slurm_ml.config import Config
from slurm_ml.model import Job, Node
from slurm_ml.policy.quarantine import DrainEvent, owned
from slurm_ml.policy.repairs import (
    LOOKBACK_S,
    BreakerView,
    NodeEvent,
    NodeRepair,
    current_findings,
    plan_repairs,
)
from slurm_ml.store.audit_log import DRAIN, drain_events, last_resets, open_alarms
from slurm_ml.store.records import AuditEntry, HealthEvent

__all__ = ["LOOKBACK_S", "breaker_view", "node_events", "repairs_for_job"]


def node_events(events: Iterable[HealthEvent]) -> list[NodeEvent]:
    return [NodeEvent(e.node, e.check_id, e.severity, e.message, int(e.observed_at.timestamp()))
            for e in events]


def breaker_view(cfg: Config, entries: Sequence[AuditEntry], nodes: Sequence[Node],
                 now: datetime) -> BreakerView:
    """slurm-ml's drains in the window plus the owned drains Slurm holds now (dated by
    their last audited drain), the open alarms and each scope's last reset (entries
    oldest first): the readers ``hooks.breaker`` uses."""
    since = now - timedelta(minutes=cfg.policy.quarantine.breaker_window_min)
    last = {e.target: e.at for e in entries if e.action == DRAIN}
    held = [DrainEvent(n.name, cls.name, last.get(n.name, now), held=True) for n in nodes
            if (cls := cfg.node_class_of(n.name)) is not None and n.drained and owned(n.reason)]
    return BreakerView(tuple(drain_events(entries, cfg, since) + held),
                       tuple(open_alarms(entries)), last_resets(entries))


def repairs_for_job(cfg: Config, nodes: Sequence[Node], jobs: Sequence[Job],
                    health: Iterable[HealthEvent], *, job_id: int, now: int) -> list[NodeRepair]:
    """The nodes under repair at the contract that ``job_id`` runs on, each with only
    that job's wait (``why``: a view, no cap or breaker consulted)."""
    rp = plan_repairs(now, nodes, jobs, current_findings(node_events(health)), cfg)
    return [replace(r, jobs=tuple(j for j in r.jobs if j.job_id == job_id))
            for r in rp.nodes if any(j.job_id == job_id for j in r.jobs)]
