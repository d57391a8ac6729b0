"""Operator views and actions on quarantine, for ``slurm-ml quarantine list|resume|reset``.

``list_quarantine``: slurm-ml's drains (with their pass streak) and the open breaker
alarms, as plain data (``to_json``). ``resume_node``: lift a drain (only an owned one
unless ``force``), audited as the operator. ``reset_breaker``: close the alarm of a node
class or of one check (audit ``breaker.reset``), so that slurm-ml drains there (for that
check) again; the reset also starts a fresh window for that scope's breaker.

Slurm errors propagate (the CLI reports them); a store that cannot be read shrinks the
view (``store_ok`` False), a store write that fails propagates: an operator action that
is not in the audit log must not look done.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from slurm_ml.config import Config
from slurm_ml.hooks.record import Recorder
from slurm_ml.hooks.wiring import Boundaries, drain_spool
from slurm_ml.model import Node
from slurm_ml.policy.quarantine import Alarm, Scope, is_check_id, owned, pass_streak
from slurm_ml.policy.repairs import (
    LOOKBACK_S,
    NodeEvent,
    NodeRepair,
    current_findings,
    plan_repairs,
)
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.audit_log import (
    RESET,
    RESUME,
    last_drain_at,
    open_alarms,
    owned_drained,
    run_results,
)
from slurm_ml.store.errors import StoreError
from slurm_ml.store.protocol import Store, WriteOutcome
from slurm_ml.store.records import AuditEntry, derive_key

__all__ = [
    "AuditNotWritten",
    "OwnedDrain",
    "QuarantineError",
    "QuarantineView",
    "ResetResult",
    "ResumeResult",
    "UnknownTarget",
    "list_quarantine",
    "reset_breaker",
    "resume_node",
]


class QuarantineError(ValueError):
    """An operator action that was refused; the message says why and what to do."""


class AuditNotWritten(QuarantineError):
    """The action was done in Slurm, but its audit entry was neither stored nor spooled."""


class UnknownTarget(QuarantineError):
    """The node or node class named does not exist (bad input, not a refusal)."""


@dataclass(frozen=True, slots=True)
class OwnedDrain:
    node: str
    node_class: str | None
    reason: str
    drained_at: datetime | None  # slurm-ml's last drain of it per the audit log
    streak: int | None  # passing checks in a row since then; None: unknown
    needed: int  # passes that resume it


@dataclass(frozen=True, slots=True)
class QuarantineView:
    drains: tuple[OwnedDrain, ...]
    alarms: tuple[Alarm, ...]
    store_ok: bool
    errors: tuple[str, ...] = ()
    #: repairs at the contract: per node, which job its drain waits for and until when
    repairs: tuple[NodeRepair, ...] = ()
    #: False: slurmctld could not be read, so the repairs are unknown, and the drains too
    #: unless ``drains_ok`` (its nodes were read, its jobs not); the alarms, from the
    #: audit log, are shown either way
    slurm_ok: bool = True
    drains_ok: bool = True
    #: what the database reads failed with, "; "-joined (None: every read worked); the
    #: alarms are unknown unless ``store_ok``, the repairs unless ``repairs_ok`` too
    store_error: str | None = None
    repairs_ok: bool = True

    def to_json(self) -> dict[str, Any]:
        """The view; a part that could not be read is null, not an empty list, so that
        "none" and "unknown" stay apart (``store_error`` and ``errors`` say why)."""
        def when(at: datetime | None) -> str | None:
            return None if at is None else at.isoformat()

        return {
            "drains": [{"node": d.node, "node_class": d.node_class, "reason": d.reason,
                        "drained_at": when(d.drained_at), "streak": d.streak,
                        "needed": d.needed} for d in self.drains] if self.drains_ok else None,
            "alarms": [{"scope": a.scope.kind, "node_class": a.node_class,
                        "check": a.check, "at": when(a.at), "drained": list(a.drained),
                        "refused": a.refused, "reset": a.scope.reset_command}
                       for a in self.alarms] if self.store_ok else None,
            "repairs": [{"node": r.node, "cause": r.cause, "why": r.why,
                         "drained": r.drained, "until": _iso(r.until),
                         "jobs": [{"job_id": j.job_id, "kind": j.kind, "until": _iso(j.until),
                                   "text": j.text} for j in r.jobs]} for r in self.repairs]
            if self.slurm_ok and self.repairs_ok else None,
            "store_ok": self.store_ok, "slurm_ok": self.slurm_ok,
            "drains_ok": self.drains_ok, "repairs_ok": self.repairs_ok,
            "store_error": self.store_error, "errors": list(self.errors)}


def _iso(epoch: int | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


@dataclass(frozen=True, slots=True)
class ResumeResult:
    node: str
    previous_reason: str
    forced: bool
    audit: WriteOutcome = WriteOutcome.LANDED  # SPOOLED: the database was unreachable


@dataclass(frozen=True, slots=True)
class ResetResult:
    node_class: str | None  # the class reset (None: a check was)
    cleared: int | None  # alarms the reset closed; None when the store could not be read
    check: str | None = None  # the check reset (None: a class was)
    #: spooled: only in this host's spool, so the fleet's breakers do not see the reset
    #: until the spool is replayed into the database
    audit: WriteOutcome = WriteOutcome.LANDED

    @property
    def scope(self) -> Scope:
        if self.check is not None:
            return Scope.of_check(self.check)
        return Scope.of_class(self.node_class or "")


def list_quarantine(*, cfg: Config, slurm: SlurmClient, store: Store,
                    now: datetime | None = None) -> QuarantineView:
    """slurm-ml's drains now (per Slurm), the open alarms (per the audit log) and the
    nodes under repair at the contract, with what each one's drain waits for."""
    rec = Recorder(store)
    entries = rec.read("audit log", lambda s: s.audit_entries())
    alarms = tuple(open_alarms(entries or []))

    def store_error() -> str | None:
        return "; ".join(rec.errors) or None

    try:
        every = slurm.list_nodes()
    except SlurmError as exc:  # the alarms still matter: show them, and say what failed
        return QuarantineView((), alarms, entries is not None,
                              (*rec.errors, f"slurmctld: {exc}"), (), slurm_ok=False,
                              drains_ok=False, store_error=store_error())
    nodes = owned_drained(every)
    need = cfg.policy.quarantine.resume_after_passes
    drains = []
    for n in sorted(nodes, key=lambda n: n.name):
        cls = cfg.node_class_of(n.name)
        at = None if entries is None else last_drain_at(entries, n.name)
        streak = None if at is None else _streak(rec, n.name, at)
        drains.append(OwnedDrain(n.name, None if cls is None else cls.name, n.reason, at,
                                 streak, need))
    try:
        repairs = _repairs(cfg, slurm, rec, every, now or datetime.now(UTC))
    except SlurmError as exc:  # the nodes were read, the jobs not: the drains stand
        return QuarantineView(tuple(drains), alarms, entries is not None,
                              (*rec.errors, f"slurmctld jobs: {exc}"), (), slurm_ok=False,
                              store_error=store_error())
    return QuarantineView(tuple(drains), alarms, entries is not None, tuple(rec.errors),
                          repairs or (), store_error=store_error(),
                          repairs_ok=repairs is not None)


def _repairs(cfg: Config, slurm: SlurmClient, rec: Recorder, nodes: list[Node],
             now: datetime) -> tuple[NodeRepair, ...] | None:
    """The daemon's repairs at the contract as a view (no cap, no breakers consulted);
    None when the health events they follow from could not be read."""
    events = rec.read("health events", lambda s: s.health_events_since(
        now - timedelta(seconds=LOOKBACK_S), limit=100_000))
    if events is None:
        return None
    found = current_findings(NodeEvent(e.node, e.check_id, e.severity, e.message,
                                       int(e.observed_at.timestamp())) for e in events)
    return plan_repairs(int(now.timestamp()), nodes, slurm.list_jobs(), found, cfg).nodes


def _streak(rec: Recorder, node: str, since: datetime) -> int | None:
    events = rec.read("health events",
                      lambda s: s.recent_health_events(node, since=since, limit=10_000))
    return None if events is None else pass_streak(run_results(events))


def _find(slurm: SlurmClient, node: str) -> Node:
    for n in slurm.list_nodes():
        if n.name == node:
            return n
    raise UnknownTarget(f"no node {node} in Slurm")


def resume_node(node: str, *, slurm: SlurmClient, store: Store, now: datetime,
                actor: str = "operator", force: bool = False) -> ResumeResult:
    """Resume ``node``: only a drain slurm-ml owns, unless ``force``; audited."""
    n = _find(slurm, node)
    if not n.drained:
        raise QuarantineError(f"{node} is not drained (state {n.state})")
    mine = owned(n.reason)
    if not mine and not force:
        raise QuarantineError(f"{node} was drained by someone else ({n.reason!r}); slurm-ml "
                              f"resumes only its own drains. Use --force to resume anyway.")
    slurm.resume_node(node)
    try:
        outcome = store.audit(AuditEntry(
            idempotency_key=derive_key("audit.resume", node, actor, now), actor=actor,
            action=RESUME, target=node, at=now,
            details={"reason": n.reason, "owned": mine, "forced": force and not mine}))
    except StoreError as exc:  # the node is back in service: say so, not only the error
        raise AuditNotWritten(f"resumed {node} (was: {n.reason}), but its audit entry "
                              f"could not be written or spooled: {exc}") from exc
    return ResumeResult(node, n.reason, force and not mine, outcome)


def reset_breaker(node_class: str | None, *, cfg: Config, store: Store, now: datetime,
                  actor: str = "operator", check: str | None = None) -> ResetResult:
    """Close the breaker alarm(s) of ``node_class``, or of ``check`` (exactly one of
    them), audited as ``breaker.reset``. From now on only drains after this reset count
    for that scope's breaker (a fresh window), even with no alarm open."""
    if node_class is not None and check is not None:
        raise UnknownTarget("name a node class or a check (--check CHECK_ID), not both")
    if check is not None:
        if not is_check_id(check):
            raise UnknownTarget(f"{check!r} is not a check id (dotted, like "
                                f"nvlink.active_links or xid.79)")
        scope = Scope.of_check(check)
    elif node_class is not None:
        if node_class not in {c.name for c in cfg.node_classes}:
            known = ", ".join(sorted(c.name for c in cfg.node_classes))
            raise UnknownTarget(f"no node class {node_class!r} (known: {known})")
        scope = Scope.of_class(node_class)
    else:
        raise UnknownTarget("name a node class or a check (--check CHECK_ID)")
    entries = Recorder(store).read("audit log", lambda s: s.audit_entries())
    cleared = None if entries is None else sum(
        1 for a in open_alarms(entries) if a.scope == scope)
    details: dict[str, object] = {"open_alarms": cleared, "scope": scope.kind}
    if check is not None:
        details["check"] = check
    outcome = store.audit(AuditEntry(
        idempotency_key=derive_key("audit.breaker.reset", scope.target, actor, now),
        actor=actor, action=RESET, target=scope.target, at=now, details=details))
    return ResetResult(node_class, cleared, check, outcome)


# ------------------------------------------------------------ through the boundaries


def quarantine_list(b: Boundaries) -> QuarantineView:
    """``list_quarantine`` on the hooks' boundaries, after the spool is written."""
    drain_spool(b.store)
    return list_quarantine(cfg=b.cfg, slurm=b.slurm, store=b.store)


def quarantine_resume(node: str, b: Boundaries, *, actor: str, force: bool) -> ResumeResult:
    drain_spool(b.store)
    return resume_node(node, slurm=b.slurm, store=b.store, now=b.clock(), actor=actor,
                       force=force)


def quarantine_reset(node_class: str | None, b: Boundaries, *, actor: str,
                     check: str | None = None) -> ResetResult:
    drain_spool(b.store)
    return reset_breaker(node_class, cfg=b.cfg, store=b.store, now=b.clock(), actor=actor,
                         check=check)
