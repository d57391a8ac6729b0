"""Quarantine: which GPU nodes slurm-ml may drain, which of its drains it may resume.

slurm-ml only ever touches drains it owns (reason starts with ``slurm-ml:``); a drain by
an admin or NHC is never resumed. Two circuit breakers bound the damage of slurm-ml's own
false positives, both over ``breaker_window_min``:

* the **class breaker**: once ``drain_budget`` nodes of a node class (``breaker_fraction``
  of it, at least one) have been drained by slurm-ml in the window, further drains of
  that class stop;
* the **check breaker**: once one check (a ``Finding.check_id``) has drained
  ``check_budget`` nodes of the whole fleet (``breaker_check_fraction`` of every managed
  node, at least two) in the window, *and* those nodes plus the next one span at least two
  node classes, that check stops draining anywhere (a driver update that changed what a
  check reads hits every class; within one class the class breaker already protects).
  Findings of other checks keep draining.

A tripped breaker raises an ``Alarm`` that stays up until an operator resets its scope.
A reset also starts a fresh window for that scope: drains at or before the last reset of
a class (check) never count for that class's (check's) breaker again. Pure: the clock,
the history and the resets come in as values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from slurm_ml.config import QuarantineConfig

OWNED_PREFIX = "slurm-ml:"
#: What may appear in a drain reason: nothing that needs quoting for ``scontrol update
#: reason=...`` or breaks ``sinfo -o`` parsing (no quotes, backslashes, newlines, |, ;).
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:/()+,#%<>=-]+")
#: What a check id looks like ("nvlink.active_links", "xid.79"): dotted words.
_CHECK_ID = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+")
#: How a check's breaker is written as an audit target and on screen.
CHECK_PREFIX = "check:"
#: The node :func:`breaker_states` asks the breakers about: no node has this name, so
#: every drain in a breaker's scope counts against it (a node's own drain never does).
_NEXT_NODE = "\0next"


def clean_reason(text: str) -> str:
    """Text made safe for a drain reason: unsafe characters become spaces, runs of
    whitespace one space."""
    return " ".join(_UNSAFE.sub(" ", text).split())


def owned(reason: str) -> bool:
    """A drain slurm-ml set (and so may lift)."""
    return reason.strip().startswith(OWNED_PREFIX)


def is_check_id(text: str) -> bool:
    """Whether ``text`` looks like a check id (dotted words: "xid.79")."""
    return _CHECK_ID.fullmatch(text) is not None


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """What one breaker guards: a node class, or one check across the fleet."""

    kind: Literal["class", "check"]
    name: str

    @classmethod
    def of_class(cls, node_class: str) -> Scope:
        return cls("class", node_class)

    @classmethod
    def of_check(cls, check: str) -> Scope:
        return cls("check", check)

    @property
    def target(self) -> str:
        """The audit target and display name: the class name, or ``check:<id>``."""
        return self.name if self.kind == "class" else CHECK_PREFIX + self.name

    @property
    def reset_command(self) -> str:
        arg = self.name if self.kind == "class" else f"--check {self.name}"
        return f"slurm-ml quarantine reset {arg}"

    def __str__(self) -> str:
        return (f"node class {self.name}" if self.kind == "class"
                else f"check {self.name}")


@dataclass(frozen=True, slots=True)
class DrainEvent:
    """slurm-ml drained ``node`` (of ``node_class``) at ``at`` for the drain findings of
    ``checks`` (empty when unknown: such a drain counts for the class breaker only).

    ``held``: the node is still drained now (Slurm's view). A held drain counts for the
    class breaker whatever its age (it keeps using the class's budget until it is
    resumed), unless it is from at or before the class's last reset.
    """

    node: str
    node_class: str
    at: datetime
    checks: frozenset[str] = frozenset()
    held: bool = False


@dataclass(frozen=True, slots=True)
class Alarm:
    """A breaker tripped; drains in its scope stop until an operator resets it.

    A class alarm has ``node_class`` and no ``check``; a check alarm has ``check`` (and
    ``node_class`` None)."""

    node_class: str | None
    at: datetime
    drained: tuple[str, ...]  # the drains in the window that tripped it
    refused: str  # the node whose drain was refused
    check: str | None = None

    @property
    def scope(self) -> Scope:
        if self.check is not None:
            return Scope.of_check(self.check)
        return Scope.of_class(self.node_class or "")


@dataclass(frozen=True, slots=True)
class DrainVerdict:
    allowed: bool
    reason: str
    alarm: Alarm | None = None  # a new alarm to record (only when this call tripped it)


@dataclass(frozen=True, slots=True)
class DrainDecision:
    """What ``decide_drain`` says about draining a node for the drain findings of
    ``checks``.

    ``acted``: the checks the node is drained for (when ``allowed``); ``set_aside``: the
    checks whose breaker is open (or tripped now), each with why; ``alarms``: the alarms
    this call raised, to record."""

    allowed: bool
    reason: str
    acted: tuple[str, ...]
    set_aside: tuple[tuple[str, str], ...] = ()
    alarms: tuple[Alarm, ...] = ()


def drain_budget(class_size: int, cfg: QuarantineConfig) -> int:
    """How many slurm-ml drains a class of ``class_size`` nodes may take per window.

    At least one: otherwise a class smaller than 1/fraction nodes could never be drained,
    and a truly broken node would keep taking jobs.
    """
    return max(1, math.floor(class_size * cfg.breaker_fraction))


def check_budget(fleet_size: int, cfg: QuarantineConfig) -> int:
    """How many nodes of the whole fleet one check may drain per window.

    At least two: the check breaker needs drains in two classes to trip, and a class's
    own budget is at least one.
    """
    return max(2, math.floor(fleet_size * cfg.breaker_check_fraction))


def _counts(e: DrainEvent, scope: Scope, since: datetime,
            resets: Mapping[Scope, datetime]) -> bool:
    """Whether ``e`` counts for ``scope``'s breaker: in the window (or still held, for a
    class) and after the scope's last reset."""
    reset = resets.get(scope)
    if reset is not None and e.at <= reset:
        return False
    return e.at > since or (e.held and scope.kind == "class")


def may_drain(node: str, node_class: str, class_size: int, *, history: Iterable[DrainEvent],
              alarms: Iterable[Alarm], now: datetime, cfg: QuarantineConfig,
              resets: Mapping[Scope, datetime] | None = None) -> DrainVerdict:
    """Whether the class breaker lets slurm-ml drain ``node`` now; trips it when not.

    ``resets``: the last reset of each scope (``store.audit_log.last_resets``)."""
    scope = Scope.of_class(node_class)
    if any(a.check is None and a.node_class == node_class for a in alarms):
        return DrainVerdict(False, f"circuit breaker open for node class {node_class}: "
                                   f"an operator must run `{scope.reset_command}`")
    since = now - timedelta(minutes=cfg.breaker_window_min)
    recent = sorted({e.node for e in history
                     if e.node_class == node_class and e.node != node
                     and _counts(e, scope, since, resets or {})})
    budget = drain_budget(class_size, cfg)
    if len(recent) < budget:
        return DrainVerdict(True, f"{len(recent) + 1} of {budget} drains allowed in "
                                  f"{node_class} per {cfg.breaker_window_min:g} min")
    alarm = Alarm(node_class=node_class, at=now, drained=tuple(recent), refused=node)
    return DrainVerdict(False, (f"circuit breaker tripped: slurm-ml already drained "
                                f"{len(recent)} of {class_size} {node_class} nodes "
                                f"({', '.join(recent)}) in the last "
                                f"{cfg.breaker_window_min:g} min; not draining {node}. "
                                f"Suspect slurm-ml's checks, then run "
                                f"`{scope.reset_command}`"), alarm)


def may_drain_for_check(node: str, node_class: str, check: str, fleet_size: int, *,
                        history: Iterable[DrainEvent], alarms: Iterable[Alarm],
                        now: datetime, cfg: QuarantineConfig,
                        resets: Mapping[Scope, datetime] | None = None) -> DrainVerdict:
    """Whether the breaker of ``check`` lets slurm-ml drain ``node`` (of ``node_class``)
    for that check now; trips it when not.

    It trips when the check already drained ``check_budget`` other nodes in the window
    (since its last reset) and those nodes plus this one span two node classes or more.
    """
    scope = Scope.of_check(check)
    if any(a.check == check for a in alarms):
        return DrainVerdict(False, f"circuit breaker open for check {check}: an operator "
                                   f"must run `{scope.reset_command}`")
    since = now - timedelta(minutes=cfg.breaker_window_min)
    classes: dict[str, str] = {}
    for e in history:
        if check in e.checks and e.node != node and _counts(e, scope, since, resets or {}):
            classes[e.node] = e.node_class
    recent = sorted(classes)
    budget = check_budget(fleet_size, cfg)
    spanned = sorted(set(classes.values()) | {node_class})
    if len(recent) < budget or len(spanned) < 2:
        return DrainVerdict(True, f"{len(recent) + 1} of {budget} drains allowed for "
                                  f"check {check} per {cfg.breaker_window_min:g} min")
    alarm = Alarm(node_class=None, at=now, drained=tuple(recent), refused=node, check=check)
    return DrainVerdict(False, (f"circuit breaker tripped for check {check}: it already "
                                f"drained {len(recent)} of {fleet_size} nodes "
                                f"({', '.join(recent)}) in {len(spanned)} node classes "
                                f"({', '.join(spanned)}) in the last "
                                f"{cfg.breaker_window_min:g} min; not draining {node} "
                                f"for it. Suspect the check (a driver or firmware "
                                f"change?), then run `{scope.reset_command}`"), alarm)


def decide_drain(node: str, node_class: str, class_size: int, fleet_size: int,
                 checks: Sequence[str], *, history: Sequence[DrainEvent],
                 alarms: Sequence[Alarm], now: datetime, cfg: QuarantineConfig,
                 resets: Mapping[Scope, datetime] | None = None) -> DrainDecision:
    """Both breakers on draining ``node`` for the drain findings of ``checks``.

    Each check's breaker goes first: a check whose breaker is open (or trips now) is set
    aside, and the node is drained for the remaining checks, if any, when the class
    breaker allows it. Nothing remaining: refused, naming the checks set aside. No
    checks at all (findings of unknown checks): the class breaker alone decides.
    """
    acted: list[str] = []
    set_aside: list[tuple[str, str]] = []
    raised: list[Alarm] = []
    for check in dict.fromkeys(checks):
        v = may_drain_for_check(node, node_class, check, fleet_size, history=history,
                                alarms=alarms, now=now, cfg=cfg, resets=resets)
        if v.allowed:
            acted.append(check)
        else:
            set_aside.append((check, v.reason))
            if v.alarm is not None:
                raised.append(v.alarm)
    if checks and not acted:
        why = "; ".join(r for _, r in set_aside)
        return DrainDecision(False, why, (), tuple(set_aside), tuple(raised))
    v = may_drain(node, node_class, class_size, history=history, alarms=alarms, now=now,
                  cfg=cfg, resets=resets)
    if v.alarm is not None:
        raised.append(v.alarm)
    reason = v.reason
    if set_aside:
        reason += "; set aside: " + "; ".join(r for _, r in set_aside)
    return DrainDecision(v.allowed, reason, tuple(acted) if v.allowed else (),
                         tuple(set_aside), tuple(raised))


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One breaker as the metrics show it. ``refusing``: it would refuse the next drain
    in its scope (an alarm is open, or its drains in the window have spent the budget,
    so the next one trips it); ``tripped``: an alarm is open, until an operator resets
    the scope."""

    refusing: bool
    tripped: bool


def breaker_states(class_sizes: Mapping[str, int], fleet_size: int, *,
                   history: Sequence[DrainEvent], alarms: Sequence[Alarm], now: datetime,
                   cfg: QuarantineConfig, resets: Mapping[Scope, datetime] | None = None,
                   ) -> dict[Scope, BreakerState]:
    """Every class breaker (``class_sizes``: each node class and its size) and the
    breaker of every check that drained in the window or has an alarm open, asked what
    the drain decision (``may_drain``, ``may_drain_for_check``) would say about a node
    not drained yet. A check's breaker refuses when it would refuse a node of some class:
    it trips only across two classes, so which class the next node is in matters. The
    alarms the questions would raise are dropped: nothing is drained or recorded."""
    out: dict[Scope, BreakerState] = {}
    tripped_classes = {a.node_class for a in alarms if a.check is None}
    for node_class, size in class_sizes.items():
        v = may_drain(_NEXT_NODE, node_class, size, history=history, alarms=alarms, now=now,
                      cfg=cfg, resets=resets)
        out[Scope.of_class(node_class)] = BreakerState(not v.allowed,
                                                       node_class in tripped_classes)
    tripped_checks = {a.check for a in alarms if a.check is not None}
    for check in sorted({c for e in history for c in e.checks} | tripped_checks):
        refusing = any(not may_drain_for_check(_NEXT_NODE, node_class, check, fleet_size,
                                               history=history, alarms=alarms, now=now,
                                               cfg=cfg, resets=resets).allowed
                       for node_class in class_sizes)
        out[Scope.of_check(check)] = BreakerState(refusing or check in tripped_checks,
                                                  check in tripped_checks)
    return out


def pass_streak(results: Sequence[bool]) -> int:
    """Clean checks in a row at the end of ``results`` (oldest first)."""
    streak = 0
    for ok in reversed(results):
        if not ok:
            break
        streak += 1
    return streak


def may_resume(reason: str, results_since_drain: Sequence[bool],
               cfg: QuarantineConfig) -> bool:
    """An owned drain is lifted after ``resume_after_passes`` clean checks in a row."""
    return owned(reason) and pass_streak(results_since_drain) >= cfg.resume_after_passes
