"""What repairs at the contract read, as ``policy.repairs`` values: the health events of
the last hour as ``NodeEvent``, and the breakers' inputs from the audit log and Slurm
(the same as ``hooks.breaker`` reads, which the daemon layer may not import)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from slurm_ml.config import Config
from slurm_ml.model import Job, Node
from slurm_ml.policy.quarantine import Alarm, DrainEvent, Scope, owned
from slurm_ml.policy.repairs import (
    FINDING_SEVERITIES,
    LOOKBACK_S,
    BreakerView,
    NodeEvent,
    NodeRepair,
    current_findings,
    plan_repairs,
)
from slurm_ml.store.records import AuditEntry, HealthEvent

__all__ = ["LOOKBACK_S", "breaker_view", "node_events", "repairs_for_job"]
_DRAIN, _TRIP, _RESET = "drain", "breaker.trip", "breaker.reset"


def node_events(events: Iterable[HealthEvent]) -> list[NodeEvent]:
    return [NodeEvent(e.node, e.check_id, e.severity, e.message, int(e.observed_at.timestamp()))
            for e in events]


def _scope(e: AuditEntry) -> Scope:
    check = e.details.get("check")
    if e.details.get("scope") == "check" and isinstance(check, str):
        return Scope.of_check(check)
    return Scope.of_class(e.target)


def _checks(e: AuditEntry) -> frozenset[str]:
    checks = e.details.get("checks")
    if isinstance(checks, list):
        return frozenset(c for c in checks if isinstance(c, str))
    found = e.details.get("findings")
    return frozenset(f["check_id"] for f in found if isinstance(f, dict)
                     and isinstance(f.get("check_id"), str)
                     and f.get("severity") in FINDING_SEVERITIES) if isinstance(found, list) \
        else frozenset()


def breaker_view(cfg: Config, entries: Sequence[AuditEntry], nodes: Sequence[Node],
                 now: datetime) -> BreakerView:
    """slurm-ml's drains in the window plus the owned drains Slurm holds now, the open
    alarms and each scope's last reset (entries oldest first)."""
    since = now - timedelta(minutes=cfg.policy.quarantine.breaker_window_min)
    history: list[DrainEvent] = []
    last: dict[str, datetime] = {}
    alarms: dict[Scope, list[Alarm]] = {}
    resets: dict[Scope, datetime] = {}
    for e in entries:
        if e.action == _DRAIN:
            last[e.target] = e.at
            cls = cfg.node_class_of(e.target)
            if e.at >= since and cls is not None:
                history.append(DrainEvent(e.target, cls.name, e.at, _checks(e)))
        elif e.action == _RESET:
            scope = _scope(e)
            alarms.pop(scope, None)
            resets[scope] = max(resets.get(scope, e.at), e.at)
        elif e.action == _TRIP:
            scope = _scope(e)
            drained, refused = e.details.get("drained"), e.details.get("refused")
            alarms.setdefault(scope, []).append(Alarm(
                node_class=scope.name if scope.kind == "class" else None, at=e.at,
                drained=tuple(str(n) for n in drained) if isinstance(drained, list) else (),
                refused=refused if isinstance(refused, str) else "",
                check=scope.name if scope.kind == "check" else None))
    for n in nodes:
        cls = cfg.node_class_of(n.name)
        if cls is not None and n.drained and owned(n.reason):
            history.append(DrainEvent(n.name, cls.name, last.get(n.name, now), held=True))
    return BreakerView(tuple(history), tuple(a for v in alarms.values() for a in v), resets)


def repairs_for_job(cfg: Config, nodes: Sequence[Node], jobs: Sequence[Job],
                    health: Iterable[HealthEvent], *, job_id: int, now: int) -> list[NodeRepair]:
    """The nodes under repair at the contract that ``job_id`` runs on, each with only
    that job's wait (``why``: a view, no cap or breaker consulted)."""
    rp = plan_repairs(now, nodes, jobs, current_findings(node_events(health)), cfg)
    return [replace(r, jobs=tuple(j for j in r.jobs if j.job_id == job_id))
            for r in rp.nodes if any(j.job_id == job_id for j in r.jobs)]
