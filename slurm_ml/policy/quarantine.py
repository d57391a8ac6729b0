"""Quarantine: which GPU nodes slurm-ml may drain, which of its drains it may resume.

slurm-ml only ever touches drains it owns (reason starts with ``slurm-ml:``); a drain by
an admin or NHC is never resumed. A circuit breaker bounds the damage of slurm-ml's own
false positives: once more than ``breaker_fraction`` of a node class has been drained by
slurm-ml within ``breaker_window_min``, further drains of that class stop and an alarm
stays up until an operator resets it. Pure: the clock and the history come in as values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurm_ml.config import QuarantineConfig

OWNED_PREFIX = "slurm-ml:"
#: What may appear in a drain reason: nothing that needs quoting for ``scontrol update
#: reason=...`` or breaks ``sinfo -o`` parsing (no quotes, backslashes, newlines, |, ;).
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:/()+,#%<>=-]+")


def clean_reason(text: str) -> str:
    """Text made safe for a drain reason: unsafe characters become spaces, runs of
    whitespace one space."""
    return " ".join(_UNSAFE.sub(" ", text).split())


def owned(reason: str) -> bool:
    """A drain slurm-ml set (and so may lift)."""
    return reason.strip().startswith(OWNED_PREFIX)


@dataclass(frozen=True, slots=True)
class DrainEvent:
    """slurm-ml drained ``node`` (of ``node_class``) at ``at``."""

    node: str
    node_class: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Alarm:
    """The breaker tripped for a node class; drains there stop until ``reset``."""

    node_class: str
    at: datetime
    drained: tuple[str, ...]  # the drains in the window that tripped it
    refused: str  # the node whose drain was refused


@dataclass(frozen=True, slots=True)
class DrainVerdict:
    allowed: bool
    reason: str
    alarm: Alarm | None = None  # a new alarm to record (only when this call tripped it)


def drain_budget(class_size: int, cfg: QuarantineConfig) -> int:
    """How many slurm-ml drains a class of ``class_size`` nodes may take per window.

    At least one: otherwise a class smaller than 1/fraction nodes could never be drained,
    and a truly broken node would keep taking jobs.
    """
    return max(1, math.floor(class_size * cfg.breaker_fraction))


def may_drain(node: str, node_class: str, class_size: int, *, history: Iterable[DrainEvent],
              alarms: Iterable[Alarm], now: datetime, cfg: QuarantineConfig) -> DrainVerdict:
    """Whether slurm-ml may drain ``node`` now; trips the breaker when it may not."""
    if any(a.node_class == node_class for a in alarms):
        return DrainVerdict(False, f"circuit breaker open for node class {node_class}: "
                                   f"an operator must run `slurm-ml quarantine reset`")
    since = now - timedelta(minutes=cfg.breaker_window_min)
    recent = sorted({e.node for e in history
                     if e.node_class == node_class and e.at > since and e.node != node})
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
                                f"`slurm-ml quarantine reset {node_class}`"), alarm)


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
