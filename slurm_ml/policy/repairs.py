"""Repairs at the contract: an unhealthy node is emptied as soon as its jobs' protected
runtime ends, so a repair needs no one to negotiate with a job's owner.

A node is *under repair* when it carries a current drain-after-job finding (a health
check found a fault while jobs ran on it; no clean check since), or when an admin
drained it with a reason matching ``policy.quarantine.maintenance_reasons``. Then:

* a finding on a node not yet drained: drain it first (an owned drain, through the
  class and check breakers), so Slurm cannot restart a job there; the requeues come in
  a later cycle, once Slurm shows the node drained. An admin's drain stays the admin's.
* each resumable job on it (batch, ``--requeue``) is requeued once its protected runtime
  (the contract: ``--time-min``, capped by ``min_runtime_cap_min``) has ended, within the
  preemption cap; a job still protected is waited for, until its protection ends.
* a job that is not resumable finishes.

The node then goes through the owned-drain path (repair, clean periodic checks, resume).
Pure: the clock, the nodes, the jobs, the findings and the breakers' history come in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from slurm_ml.config import Config, ContractsConfig
from slurm_ml.model import Job, JobState, Node, expand_hosts
from slurm_ml.policy.admission import contract_min_runtime_s
from slurm_ml.policy.quarantine import (
    OWNED_PREFIX,
    Alarm,
    DrainEvent,
    Scope,
    clean_reason,
    decide_drain,
    owned,
)

__all__ = [
    "DRAIN_NOW",
    "FINDING_SEVERITIES",
    "HOOK_DRAIN_GRACE_S",
    "LOOKBACK_S",
    "PASS_CHECK",
    "BreakerView",
    "JobWait",
    "NodeEvent",
    "NodeFinding",
    "NodeRepair",
    "RepairDrain",
    "RepairPlan",
    "RepairRequeue",
    "current_findings",
    "maintenance_match",
    "plan_repairs",
]

#: The severity of a finding its hook drains the node for at once (through the breakers).
DRAIN_NOW = "drain"
#: Severities of a finding that drains the node (after its jobs, or at once).
FINDING_SEVERITIES = frozenset({"drain_after_job", DRAIN_NOW})
#: The health event a clean periodic check records: it ends a finding.
PASS_CHECK = "health.pass"
#: How far back findings are read: periodic checks run far more often than this.
LOOKBACK_S = 3600
#: How long a drain-now finding stays its hook's to act on: the hook drains the node
#: itself within its own limit (the wrapper kills it at 50 s; PrologEpilogTimeout is set
#: above that). Draining it from here sooner races the hook, and the faster of the two
#: sets the reason; after this, a node still in service with the finding (a breaker
#: refused, or Slurm could not be asked) is the repair's.
HOOK_DRAIN_GRACE_S = 90

Cause = Literal["finding", "maintenance"]
#: requeue: requeued now; protected: waits until its protection ends; finishes: not
#: resumable, the drain waits for its end; capped: the preemption cap is spent, it waits
#: for the cap's window; drain_first: the node is drained first, the requeue follows;
#: breaker: a breaker refused the drain, the job is left alone.
WaitKind = Literal["requeue", "protected", "finishes", "capped", "drain_first", "breaker"]


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A health event as this module needs it (the daemon and the CLI convert theirs)."""

    node: str
    check_id: str
    severity: str
    message: str
    at: int  # epoch seconds


@dataclass(frozen=True, slots=True)
class NodeFinding:
    """A drain finding recorded on ``node`` with no clean check since."""

    node: str
    check_id: str
    message: str
    at: int
    severity: str = "drain_after_job"


@dataclass(frozen=True, slots=True)
class BreakerView:
    """What the breakers need, read from the audit log and Slurm (``hooks.breaker`` has
    the same inputs): slurm-ml's drains, the open alarms and each scope's last reset."""

    history: tuple[DrainEvent, ...] = ()
    alarms: tuple[Alarm, ...] = ()
    resets: Mapping[Scope, datetime] | None = None


@dataclass(frozen=True, slots=True)
class JobWait:
    """What the repair of a node does with one job on it, and until when (epoch)."""

    job_id: int
    kind: WaitKind
    until: int | None  # protected: when its protection ends; None: its own end, unknown
    text: str


@dataclass(frozen=True, slots=True)
class NodeRepair:
    """One node under repair: why, and what its drain waits for."""

    node: str
    cause: Cause
    why: str  # the checks found, or the admin's drain reason
    drained: bool
    jobs: tuple[JobWait, ...]

    @property
    def until(self) -> int | None:
        """When the last protected job's protection ends (None: none is protected)."""
        return max((j.until for j in self.jobs if j.kind == "protected" and j.until),
                   default=None)


@dataclass(frozen=True, slots=True)
class RepairDrain:
    node: str
    reason: str  # an owned drain reason
    checks: tuple[str, ...]
    breaker: str  # the breakers' verdict
    first_seen: int  # the oldest current finding: part of the action's identity


@dataclass(frozen=True, slots=True)
class RepairRequeue:
    job_id: int
    node: str
    gpus: int
    start: int
    reason: str
    details: dict[str, object]


@dataclass(frozen=True, slots=True)
class RepairPlan:
    drains: tuple[RepairDrain, ...]
    requeues: tuple[RepairRequeue, ...]
    nodes: tuple[NodeRepair, ...]


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def current_findings(events: Iterable[NodeEvent]) -> dict[str, list[NodeFinding]]:
    """Per node, its drain findings recorded after its last clean check (oldest first)."""
    last_pass: dict[str, int] = {}
    evs = sorted(events, key=lambda e: e.at)
    for e in evs:
        if e.check_id == PASS_CHECK:
            last_pass[e.node] = max(last_pass.get(e.node, e.at), e.at)
    out: dict[str, list[NodeFinding]] = {}
    for e in evs:
        if e.severity in FINDING_SEVERITIES and e.at > last_pass.get(e.node, -1):
            out.setdefault(e.node, []).append(NodeFinding(e.node, e.check_id, e.message, e.at,
                                                               e.severity))
    return out


def _hooks_own(finding: NodeFinding, now: int) -> bool:
    """Whether ``finding`` is still its hook's to drain for (see HOOK_DRAIN_GRACE_S)."""
    return finding.severity == DRAIN_NOW and now - finding.at < HOOK_DRAIN_GRACE_S


def maintenance_match(reason: str, patterns: Sequence[str]) -> str | None:
    """The first pattern (a case-insensitive regex; a word is a substring) that an
    admin's drain reason matches; None for an owned drain or no match."""
    if not reason or owned(reason):
        return None
    for p in patterns:
        if re.search(p, reason, re.IGNORECASE):
            return p
    return None


def protected_until(job: Job, cfg: ContractsConfig) -> int:
    """When ``job``'s protected runtime ends (epoch): its contract, capped by
    ``min_runtime_cap_min``; unknown: the cap."""
    cap = int(cfg.min_runtime_cap_min * 60)
    contract = contract_min_runtime_s(job.admin_comment, job.time_min_min)
    return (job.start_time or 0) + (cap if contract is None else min(contract, cap))


def _drain_for(node: Node, findings: Sequence[NodeFinding], cfg: Config,
               breaker: BreakerView, now: int) -> RepairDrain | str:
    """The owned drain of ``node`` for ``findings``, or why the breakers refuse it."""
    checks = list(dict.fromkeys(f.check_id for f in findings))
    cls = cfg.node_class_of(node.name)
    if cls is None:
        return f"{node.name} is in no slurm-ml node class: slurm-ml does not drain it"
    members = [n for n in cfg.all_nodes()
               if (c := cfg.node_class_of(n)) is not None and c.name == cls.name]
    d = decide_drain(node.name, cls.name, len(members), len(cfg.all_nodes()), checks,
                     history=breaker.history, alarms=breaker.alarms,
                     now=datetime.fromtimestamp(now, UTC), cfg=cfg.policy.quarantine,
                     resets=breaker.resets)
    if not d.allowed:
        return d.reason
    acted = d.acted or tuple(checks)
    more = f" +{len(acted) - 1} more" if len(acted) > 1 else ""
    reason = clean_reason(f"{OWNED_PREFIX} {acted[0]}{more} (repair at the contract)")
    return RepairDrain(node.name, reason[:99], acted, d.reason, min(f.at for f in findings))


def plan_repairs(now: int, nodes: Sequence[Node], jobs: Sequence[Job],
                 findings: Mapping[str, Sequence[NodeFinding]], cfg: Config, *,
                 budget_left: int | None = None, breaker: BreakerView | None = None,
                 skip_jobs: Iterable[int] = ()) -> RepairPlan:
    """This cycle's repairs at the contract (see the module doc).

    ``budget_left``: GPUs the preemption cap still allows (None: unbounded, for a view);
    ``breaker``: None when it was not read (a view: no drain is decided); ``skip_jobs``:
    jobs this cycle already acts on."""
    q, contracts = cfg.policy.quarantine, cfg.policy.contracts
    under = [n for n in nodes if findings.get(n.name)
             or (n.drained and maintenance_match(n.reason, q.maintenance_reasons))]
    if not under:  # the usual cycle: nothing to repair, no job list to walk
        return RepairPlan((), (), ())
    nodes = under
    skip = set(skip_jobs)
    on: dict[str, list[Job]] = {}
    for j in jobs:
        # GPU jobs only: the contract (admission's protected runtime) is theirs
        if (j.state == JobState.RUNNING and j.start_time and j.total_gpus > 0
                and j.job_id not in skip):
            for h in expand_hosts(j.nodes):
                on.setdefault(h, []).append(j)
    left = budget_left
    requeued: set[int] = set()
    drains: list[RepairDrain] = []
    requeues: list[RepairRequeue] = []
    out: list[NodeRepair] = []
    for node in sorted(nodes, key=lambda n: n.name):
        mine = sorted(on.get(node.name, ()), key=lambda j: (j.start_time or 0, j.job_id))
        found = findings.get(node.name, ())
        pattern = (maintenance_match(node.reason, q.maintenance_reasons)
                   if node.drained else None)
        if not mine or (not found and pattern is None):
            continue
        if (not node.drained and found and pattern is None
                and all(_hooks_own(f, now) for f in found)):
            continue  # the hook that found it is draining the node itself
        cause: Cause = "finding" if found else "maintenance"
        checks = ", ".join(dict.fromkeys(f.check_id for f in found))
        why = (f"drains after job for {checks}" if found
               else f"drained for maintenance by an admin ({node.reason!r} matches {pattern!r})")
        blocked: WaitKind | None = None
        block_text = ""
        if not node.drained:
            verdict = (_drain_for(node, found, cfg, breaker, now) if breaker is not None
                       else "the breakers were not consulted")
            if isinstance(verdict, RepairDrain):
                drains.append(verdict)
                blocked, block_text = "drain_first", (
                    f"{node.name} is drained first ({verdict.reason}); the requeue follows "
                    f"in the next cycle, so that Slurm cannot restart the job there")
            else:
                blocked, block_text = ("breaker", f"{node.name} is not drained: {verdict}"
                                       ) if breaker is not None else ("drain_first", (
                                           f"{node.name} is to be drained first"))
        waits: list[JobWait] = []
        for j in mine:
            until = protected_until(j, contracts)
            resumable = j.requeue and j.batch
            if not resumable:
                what = "an interactive session" if not j.batch else "not requeueable (--no-requeue)"
                waits.append(JobWait(j.job_id, "finishes", None,
                                     f"job {j.job_id} is {what}: it runs to its end"))
                continue
            if until > now:
                waits.append(JobWait(j.job_id, "protected", until,
                                     f"job {j.job_id} is protected until {_iso(until)}; "
                                     f"it is requeued then"))
                continue
            if blocked is not None:
                waits.append(JobWait(j.job_id, blocked, None, block_text))
                continue
            if j.job_id in requeued:
                continue  # a multi-node job on two nodes under repair: requeued once
            gpus = j.total_gpus
            if left is not None and gpus > left:
                waits.append(JobWait(j.job_id, "capped", None, (
                    f"job {j.job_id} ({gpus} GPUs) waits: the preemption cap allows "
                    f"{left} more GPU(s) in this window")))
                continue
            if left is not None:
                left -= gpus
            requeued.add(j.job_id)
            reason = (f"repair at the contract: {node.name} {why}; job {j.job_id}'s "
                      f"protected runtime ended at {_iso(until)}, requeued so that the "
                      f"node can be repaired")
            requeues.append(RepairRequeue(j.job_id, node.name, gpus, j.start_time or 0,
                                          reason, {
                "node": node.name, "cause": cause, "checks": [f.check_id for f in found],
                "drain_reason": node.reason, "protected_until": until,
                "ran_s": now - (j.start_time or now)}))
            waits.append(JobWait(j.job_id, "requeue", until, reason))
        out.append(NodeRepair(node.name, cause, why, node.drained, tuple(waits)))
    return RepairPlan(tuple(drains), tuple(requeues), tuple(out))
