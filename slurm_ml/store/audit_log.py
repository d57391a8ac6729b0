"""What the audit log and the health events say about drains, alarms and passes.

Audit conventions (every hook and operator action writes these):

=================  ===========  ======================================================
action             target       details
=================  ===========  ======================================================
``drain``          node         node_class, reason, breaker, hook, job_id, findings
                                (the ones acted on), checks (their drain checks),
                                set_aside (checks whose breaker refused them),
                                applied (False: the Slurm call failed), slurm_error
``breaker.trip``   scope        scope ("class" or "check"), check (check scope),
                                drained (nodes in the window), refused, breaker, ...
``breaker.reset``  scope        scope, check, open_alarms (how many it cleared)
``resume``         node         reason (the drain lifted), streak / forced, ...
=================  ===========  ======================================================

A breaker's scope is a node class (target: the class name) or one check across the fleet
(target ``check:<id>``, details ``scope: "check"`` and ``check``). Entries written before
check breakers existed have no ``scope``: they are class entries, as they always were.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from slurm_ml.config import Config
from slurm_ml.model import Node
from slurm_ml.policy.quarantine import Alarm, DrainEvent, Scope, owned
from slurm_ml.policy.repairs import FINDING_SEVERITIES, PASS_CHECK
from slurm_ml.store.records import AuditEntry, HealthEvent

__all__ = [
    "DRAIN",
    "PASS_CHECK",
    "RESET",
    "RESUME",
    "TRIP",
    "class_nodes",
    "drain_checks",
    "drain_events",
    "entry_scope",
    "last_drain_at",
    "last_resets",
    "open_alarms",
    "owned_drained",
    "run_results",
]

DRAIN, RESUME, TRIP, RESET = "drain", "resume", "breaker.trip", "breaker.reset"
#: PASS_CHECK: the health event a clean periodic check records (policy.repairs' one name).
_DRAINING = FINDING_SEVERITIES  # the severities that drain (now or after the job)


def class_nodes(cfg: Config, node_class: str) -> list[str]:
    """Every node of a configured class."""
    return [n for n in cfg.all_nodes()
            if (c := cfg.node_class_of(n)) is not None and c.name == node_class]


def drain_checks(details: Mapping[str, Any]) -> frozenset[str]:
    """The checks a ``drain`` entry drained for: its ``checks``, or (older entries) the
    check ids of its drain-severity ``findings``."""
    checks = details.get("checks")
    if isinstance(checks, list):
        return frozenset(c for c in checks if isinstance(c, str))
    findings = details.get("findings")
    if not isinstance(findings, list):
        return frozenset()
    return frozenset(f["check_id"] for f in findings
                     if isinstance(f, dict) and isinstance(f.get("check_id"), str)
                     and f.get("severity") in _DRAINING)


def drain_events(entries: Iterable[AuditEntry], cfg: Config, since: datetime) -> list[DrainEvent]:
    """slurm-ml's drains (audit ``drain``) at or after ``since``, with their node class
    and the checks they drained for."""
    out = []
    for e in entries:
        if e.action != DRAIN or e.at < since:
            continue
        cls = e.details.get("node_class")
        if not isinstance(cls, str):
            known = cfg.node_class_of(e.target)
            cls = None if known is None else known.name
        if cls is not None:
            out.append(DrainEvent(e.target, cls, e.at, drain_checks(e.details)))
    return out


def entry_scope(e: AuditEntry) -> Scope:
    """The breaker scope of a ``breaker.trip`` or ``breaker.reset`` entry (an entry
    without ``scope`` is a class entry: the format before check breakers)."""
    check = e.details.get("check")
    if e.details.get("scope") == "check" and isinstance(check, str):
        return Scope.of_check(check)
    return Scope.of_class(e.target)


def open_alarms(entries: Iterable[AuditEntry]) -> list[Alarm]:
    """Breaker trips not followed by a reset of their scope (entries oldest first)."""
    alarms: dict[Scope, list[Alarm]] = {}
    for e in entries:
        if e.action == RESET:
            alarms.pop(entry_scope(e), None)
        elif e.action == TRIP:
            scope = entry_scope(e)
            drained = e.details.get("drained")
            refused = e.details.get("refused")
            alarms.setdefault(scope, []).append(Alarm(
                node_class=scope.name if scope.kind == "class" else None, at=e.at,
                drained=tuple(str(n) for n in drained) if isinstance(drained, list) else (),
                refused=refused if isinstance(refused, str) else "",
                check=scope.name if scope.kind == "check" else None))
    return [a for per_scope in alarms.values() for a in per_scope]


def last_resets(entries: Iterable[AuditEntry]) -> dict[Scope, datetime]:
    """The latest ``breaker.reset`` of each scope: the start of its fresh window."""
    out: dict[Scope, datetime] = {}
    for e in entries:
        if e.action == RESET:
            scope = entry_scope(e)
            if scope not in out or e.at > out[scope]:
                out[scope] = e.at
    return out


def last_drain_at(entries: Iterable[AuditEntry], node: str) -> datetime | None:
    """When slurm-ml last drained ``node`` (entries oldest first), None if never."""
    at = None
    for e in entries:
        if e.action == DRAIN and e.target == node:
            at = e.at
    return at


def owned_drained(nodes: Iterable[Node]) -> list[Node]:
    """Nodes that are drained with a reason slurm-ml owns."""
    return [n for n in nodes if n.drained and owned(n.reason)]


def run_results(events: Sequence[HealthEvent], *, exclude_run: str | None = None) -> list[bool]:
    """Pass/fail of each check run in ``events``, oldest first.

    Events group into runs by ``details["run"]``. A run passed if it recorded
    ``health.pass``; it failed if it recorded a drain-severity finding, or if it was a
    periodic run without a pass (a probe that timed out proves nothing). Other runs (a
    prolog or epilog that only flagged) say nothing and are left out.
    """
    runs: dict[str, tuple[datetime, str, bool, bool]] = {}
    for e in sorted(events, key=lambda e: e.observed_at):
        run = e.details.get("run")
        key = run if isinstance(run, str) else f"{e.observed_at.isoformat()}"
        if key == exclude_run:
            continue
        at, hook, passed, failed = runs.get(key, (e.observed_at, "", False, False))
        hook = hook or str(e.details.get("hook", ""))
        passed = passed or e.check_id == PASS_CHECK
        failed = failed or e.severity in _DRAINING
        runs[key] = (at, hook, passed, failed)
    out = []
    for _, hook, passed, failed in sorted(runs.values(), key=lambda r: r[0]):
        if failed or (hook == "periodic" and not passed):
            out.append(False)
        elif passed:
            out.append(True)
    return out
