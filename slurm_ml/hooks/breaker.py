"""The one way a hook drains a node: through the circuit breakers, with an audit entry.

History for the breakers (``policy.quarantine.decide_drain``) is slurm-ml's drains in the
audit log within the window (with the checks each drained for), UNION the nodes of the
class that Slurm shows drained with an owned reason right now, dated by slurm-ml's last
drain of them in the audit log (now when it has none) and held: a long-standing owned
drain keeps using the class's budget until it is resumed, or until the class is reset
after it. Open alarms and the last reset of each scope come from the audit log. When the
store cannot be read, the Slurm view alone decides.

A check whose breaker is open (or trips now) is set aside: its findings are logged and
audited (``set_aside`` of the drain entry, or the trip), and the node is drained for the
drain findings of the other checks, if any, with a reason built from those alone.

A node that is already drained (by anyone) is never drained again: re-draining would
replace an admin's reason with an owned one, which slurm-ml would later resume.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from slurm_ml.config import Config
from slurm_ml.health.checks import Finding, drain_reason
from slurm_ml.hooks.record import Recorder, finding_dict
from slurm_ml.model import Node
from slurm_ml.policy.quarantine import Alarm, DrainEvent, decide_drain, owned
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.audit_log import (
    DRAIN,
    TRIP,
    class_nodes,
    drain_events,
    last_drain_at,
    last_resets,
    open_alarms,
)
from slurm_ml.store.records import AuditEntry, derive_key

__all__ = ["DrainAction", "DrainOutcome", "drain_via_breaker"]

log = logging.getLogger(__name__)

#: drained: slurm-ml drained it now (perhaps for only some of its checks: see set_aside);
#: already_drained: it was drained before (any reason); refused: a breaker said no (for
#: every check found); failed: the breakers allowed it but Slurm could not be asked or
#: said no; unmanaged: the node is in no node class.
DrainOutcome = Literal["drained", "already_drained", "refused", "failed", "unmanaged"]


@dataclass(frozen=True, slots=True)
class DrainAction:
    outcome: DrainOutcome
    reason: str  # the reason slurm-ml set (or would have); the existing one if already drained
    explanation: str  # the breaker's verdict, or what went wrong
    alarm: Alarm | None = None  # the (first) alarm this call raised (breaker tripped)
    set_aside: tuple[str, ...] = ()  # checks not acted on: their breaker is open
    alarms: tuple[Alarm, ...] = ()  # every alarm this call raised

    @property
    def node_out_of_service(self) -> bool:
        """After this action the node takes no new work (or Slurm will drain it itself
        once the prolog fails: ``failed`` means the breaker allowed the drain)."""
        return self.outcome in ("drained", "already_drained", "failed")


def drain_via_breaker(node: str, findings: Sequence[Finding], *, cfg: Config,
                      slurm: SlurmClient, rec: Recorder, now: datetime, hook: str,
                      job_id: int | None = None, nodes: Sequence[Node] | None = None
                      ) -> DrainAction:
    """Drain ``node`` for ``findings`` if the breakers allow it; audit what happened.

    ``nodes``: Slurm's node list if the caller already has it. The Slurm client must have
    a short timeout (the CLI builds hooks' clients with ~5 s)."""
    reason = drain_reason(findings)
    node_class = cfg.node_class_of(node)
    if node_class is None:
        return DrainAction("unmanaged", reason, f"{node} is in no slurm-ml node class")
    error = None
    if nodes is None:
        try:
            nodes = slurm.list_nodes()
        except SlurmError as exc:
            error = f"cannot list nodes: {exc}"
    me = next((n for n in nodes or () if n.name == node), None)
    if me is not None and me.drained:
        return DrainAction("already_drained", me.reason, f"{node} is already drained")
    members = set(class_nodes(cfg, node_class.name))
    entries = rec.read("audit log", lambda s: s.audit_entries()) or []
    since = now - timedelta(minutes=cfg.policy.quarantine.breaker_window_min)
    history = drain_events(entries, cfg, since) + [
        DrainEvent(n.name, node_class.name, last_drain_at(entries, n.name) or now, held=True)
        for n in nodes or () if n.name in members and n.drained and owned(n.reason)]
    checks = list(dict.fromkeys(f.check_id for f in findings if f.severity.drains))
    decision = decide_drain(node, node_class.name, len(members), len(cfg.all_nodes()),
                            checks, history=history, alarms=open_alarms(entries), now=now,
                            cfg=cfg.policy.quarantine, resets=last_resets(entries))
    aside = tuple(c for c, _ in decision.set_aside)
    acted = [f for f in findings if f.check_id not in aside]
    if aside and any(f.severity.drains for f in acted):
        reason = drain_reason(acted)  # what the node is drained for, not what was set aside
    who = f"slurm-ml/{hook}"
    common = {"hook": hook, "job_id": job_id, "node_class": node_class.name,
              "breaker": decision.reason, "findings": [finding_dict(f) for f in acted],
              "checks": list(decision.acted),
              "set_aside": [{"check": c, "why": why,
                             "findings": [finding_dict(f) for f in findings
                                          if f.check_id == c]}
                            for c, why in decision.set_aside]}
    for c, why in decision.set_aside if decision.allowed else ():  # else: all in one line
        log.warning("not draining %s for check %s: %s", node, c, why)
    for a in decision.alarms:
        scope = a.scope
        rec.write(AuditEntry(
            idempotency_key=derive_key("audit.breaker.trip", scope.target, node, hook,
                                       job_id if job_id is not None else now),
            actor=who, action=TRIP, target=scope.target, at=now,
            details=common | {"node": node, "drained": list(a.drained),
                              "refused": a.refused, "reason": reason, "scope": scope.kind,
                              "check": a.check}))
    alarm = decision.alarms[0] if decision.alarms else None
    if not decision.allowed:
        log.warning("not draining %s: %s", node, decision.reason)
        return DrainAction("refused", reason, decision.reason, alarm,
                           aside, decision.alarms)
    if error is None:  # never drain a node whose current state is unknown (see module doc)
        try:
            slurm.drain_node(node, reason)
        except SlurmError as exc:
            error = f"scontrol drain failed: {exc}"
    rec.write(AuditEntry(
        idempotency_key=derive_key("audit.drain", node, hook,
                                   job_id if job_id is not None else now),
        actor=who, action=DRAIN, target=node, at=now,
        details=common | {"reason": reason, "applied": error is None, "slurm_error": error}))
    if error is not None:
        log.error("could not drain %s (%s): %s", node, reason, error)
        return DrainAction("failed", reason, error, alarm, aside, decision.alarms)
    log.warning("drained %s: %s", node, reason)
    return DrainAction("drained", reason, decision.reason, alarm, aside, decision.alarms)
