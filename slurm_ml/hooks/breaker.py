"""The one way a hook drains a node: through the circuit breaker, with an audit entry.

History for the breaker (``policy.quarantine.may_drain``) is slurm-ml's drains in the
audit log within the window, UNION the nodes of the class that Slurm shows drained with
an owned reason right now (counted as drained now: a long-standing owned drain keeps
using the class's budget until it is resumed). Open alarms come from the audit log. When
the store cannot be read, the Slurm view alone decides.

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
from slurm_ml.hooks.history import DRAIN, TRIP, class_nodes, drain_events, open_alarms
from slurm_ml.hooks.record import Recorder, finding_dict
from slurm_ml.model import Node
from slurm_ml.policy.quarantine import Alarm, DrainEvent, may_drain, owned
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.records import AuditEntry, derive_key

__all__ = ["DrainAction", "DrainOutcome", "drain_via_breaker"]

log = logging.getLogger(__name__)

#: drained: slurm-ml drained it now; already_drained: it was drained before (any reason);
#: refused: the breaker said no; failed: the breaker allowed it but Slurm could not be
#: asked or said no; unmanaged: the node is in no node class.
DrainOutcome = Literal["drained", "already_drained", "refused", "failed", "unmanaged"]


@dataclass(frozen=True, slots=True)
class DrainAction:
    outcome: DrainOutcome
    reason: str  # the reason slurm-ml set (or would have); the existing one if already drained
    explanation: str  # the breaker's verdict, or what went wrong
    alarm: Alarm | None = None  # the alarm this call raised (breaker tripped)

    @property
    def node_out_of_service(self) -> bool:
        """After this action the node takes no new work (or Slurm will drain it itself
        once the prolog fails: ``failed`` means the breaker allowed the drain)."""
        return self.outcome in ("drained", "already_drained", "failed")


def drain_via_breaker(node: str, findings: Sequence[Finding], *, cfg: Config,
                      slurm: SlurmClient, rec: Recorder, now: datetime, hook: str,
                      job_id: int | None = None, nodes: Sequence[Node] | None = None
                      ) -> DrainAction:
    """Drain ``node`` for ``findings`` if the breaker allows it; audit what happened.

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
        DrainEvent(n.name, node_class.name, now) for n in nodes or ()
        if n.name in members and n.drained and owned(n.reason)]
    verdict = may_drain(node, node_class.name, len(members), history=history,
                        alarms=open_alarms(entries), now=now, cfg=cfg.policy.quarantine)
    who = f"slurm-ml/{hook}"
    common = {"hook": hook, "job_id": job_id, "node_class": node_class.name,
              "breaker": verdict.reason, "findings": [finding_dict(f) for f in findings]}
    if not verdict.allowed:
        log.warning("not draining %s: %s", node, verdict.reason)
        if verdict.alarm is not None:
            a = verdict.alarm
            rec.write(AuditEntry(
                idempotency_key=derive_key("audit.breaker.trip", a.node_class, node, hook,
                                           job_id if job_id is not None else now),
                actor=who, action=TRIP, target=a.node_class, at=now,
                details=common | {"node": node, "drained": list(a.drained),
                                  "refused": a.refused, "reason": reason}))
        return DrainAction("refused", reason, verdict.reason, verdict.alarm)
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
        return DrainAction("failed", reason, error)
    log.warning("drained %s: %s", node, reason)
    return DrainAction("drained", reason, verdict.reason)
