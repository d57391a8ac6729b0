"""Periodic health (``HealthCheckProgram``): full check, samples, drain or resume.

Each run checks every GPU and records its findings, or one ``health.pass`` event
(severity "pass") when nothing drains; the resume streak counts those passes. Then:

* node drained with a reason slurm-ml owns: resume it once ``resume_after_passes``
  runs in a row passed since slurm-ml's drain (audit ``drain``); audit ``resume`` with
  the evidence. Drains slurm-ml does not own are never touched.
* node not drained, a drain-severity finding, no job on it: drain through the breaker.
  With jobs on it, the findings are recorded as ``drain_after_job`` (the job's epilog
  re-checks and drains).

Utilisation samples (for the daemon's zombie detection) are best effort: a GPU's
processes map to a job through ``procs`` (cgroup / SLURM_JOB_ID); without ``procs`` the
GPUs with processes are attributed only when exactly one job runs on the node. GPUs
whose probe reading lacks utilisation or memory are skipped.

The node's textfile for node_exporter: every run, whatever it decided (a node in no
node class included), hands what it knows to ``publish`` (``hooks.textfile``): the
verdict, findings, snapshot, Slurm's view of the node and the GPUs mapped to jobs. What
could not be published is one note in the outcome; it never changes the verdict.

Orphan GPU processes: with ``procs``, a live process on a GPU that belongs to no job
running on the node is recorded as one ``process.orphan`` event per GPU (severity
"flag": it never drains here; the reconciler daemon drains the node with an owned
reason). Without ``procs``, or when Slurm did not say which jobs run here, nothing is
recorded: an unknown owner is not evidence of an orphan.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from slurm_ml.config import Config
from slurm_ml.health.checks import Finding, Severity, Thresholds, check_node
from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.snapshot import NodeSnapshot
from slurm_ml.health.textfile import NodeHealth
from slurm_ml.hooks.breaker import DrainAction, drain_via_breaker
from slurm_ml.hooks.common import DEFAULT_THRESHOLDS, jobs_on_node, node_expectations
from slurm_ml.hooks.deadline import take_snapshot
from slurm_ml.hooks.procs import ProcessTable, job_of
from slurm_ml.hooks.record import Recorder, finding_events, run_key
from slurm_ml.hooks.stats import util_samples
from slurm_ml.hooks.textfile import Publish
from slurm_ml.model import Job, Node
from slurm_ml.policy.quarantine import may_resume, owned, pass_streak
from slurm_ml.policy.reclaim import ORPHAN_CHECK
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.audit_log import PASS_CHECK, RESUME, last_drain_at, run_results
from slurm_ml.store.protocol import Store
from slurm_ml.store.records import AuditEntry, HealthEvent, derive_key

__all__ = ["ORPHAN_CHECK", "PeriodicOutcome", "run_periodic"]

log = logging.getLogger(__name__)
HOOK = "periodic"
#: The actions after which Slurm shows the node's drain state changed.
_CHANGES_DRAIN = frozenset({"drained", "resumed"})


@dataclass(frozen=True, slots=True)
class PeriodicOutcome:
    """``action``: skipped | pass | recorded | deferred (drain findings, jobs running) |
    drained | refused | drain_failed | resumed | resume_failed | held (owned drain, not
    enough passes yet) | foreign_drain (drained by someone else: untouched)."""

    node: str
    action: str
    message: str
    passed: bool = False
    findings: tuple[Finding, ...] = ()
    streak: int | None = None
    drain: DrainAction | None = None
    samples_recorded: int = 0
    store_errors: tuple[str, ...] = ()
    orphan_gpus: tuple[int, ...] = ()  # GPUs with a process of no job running here
    textfile_error: str | None = None  # why the node's textfile was not written


def run_periodic(node: str, *, cfg: Config, probe: GpuProbe, slurm: SlurmClient,
                 store: Store, now: datetime, thresholds: Thresholds = DEFAULT_THRESHOLDS,
                 procs: ProcessTable | None = None, probe_timeout_s: float = 30.0,
                 xid_since: float | None = None,
                 publish: Publish | None = None) -> PeriodicOutcome:
    """One periodic check of ``node``; see the module doc."""
    idle_pct = cfg.policy.reclaim.zombie_util_pct
    known = node_expectations(cfg, node)
    if known is None:
        # No verdict to publish, and no Slurm call for it: HealthCheckProgram runs on
        # every node, GPU-less ones too, and they must not read as failing GPU checks.
        return _published(PeriodicOutcome(node, "skipped",
                                          f"{node} is in no slurm-ml node class"),
                          publish, NodeHealth(node, now, "skipped", None, idle_pct))
    snap, failure = take_snapshot(probe, node, None, probe_timeout_s)
    findings = (check_node(snap, known[1], thresholds, xid_since=xid_since)
                if snap is not None else [failure] if failure is not None else [])
    passed = snap is not None and not any(f.severity.drains for f in findings)
    me, jobs = _slurm_view(slurm, node)
    busy = jobs is None or bool(jobs)
    defer = busy and (me is None or not me.drained)
    rec = Recorder(store)
    run = run_key(HOOK, node, None, now)
    rec.write_all(finding_events(findings, hook=HOOK, node=node, run=run, job_id=None, now=now,
                                 severity=_deferred if defer else None))
    orphans = (_orphan_events(snap, jobs, procs, node=node, run=run, now=now)
               if snap is not None and jobs is not None and procs is not None else [])
    rec.write_all(orphans)
    if passed:
        rec.write(_pass_event(node, run, now, len(findings) + len(orphans), snap))
    gpu_jobs = (_gpu_jobs(snap, jobs, procs)
                if snap is not None and jobs is not None else None)
    samples = rec.write_all(util_samples(snap, gpu_jobs, now=now)
                            ) if snap is not None and gpu_jobs else 0

    def done(action: str, message: str, streak: int | None = None,
             drain: DrainAction | None = None) -> PeriodicOutcome:
        out = PeriodicOutcome(node, action, message, passed, tuple(findings), streak, drain,
                              samples, tuple(rec.errors),
                              tuple(e.gpu_index for e in orphans if e.gpu_index is not None))
        if publish is None:
            return out
        # A drain or resume changed what Slurm shows: publish that, not what it showed
        # before (the next run is one HealthCheckInterval away).
        after = _node_view(slurm, node) if action in _CHANGES_DRAIN else me
        return _published(out, publish, NodeHealth(
            node, now, action, passed, idle_pct, tuple(findings), snap, after, gpu_jobs,
            thresholds=thresholds))

    verdict = "pass" if passed else f"{len(findings)} finding(s)"
    if me is not None and me.drained:
        if not owned(me.reason):
            return done("foreign_drain", f"{node}: {verdict}; drained by someone else "
                                         f"({me.reason!r}), not touched")
        return done(*_maybe_resume(me, passed, run, cfg=cfg, slurm=slurm, rec=rec, now=now))
    if not any(f.severity.drains for f in findings):
        return done("pass" if passed else "recorded", f"{node}: {verdict}")
    if defer:
        return done("deferred", f"{node}: {verdict}; jobs running, the epilog drains")
    act = drain_via_breaker(node, findings, cfg=cfg, slurm=slurm, rec=rec, now=now, hook=HOOK,
                            nodes=[me] if me is not None else None)
    action = "drain_failed" if act.outcome == "failed" else act.outcome
    return done(action, f"{node}: {act.reason} -> {action} ({act.explanation})", drain=act)


def _published(out: PeriodicOutcome, publish: Publish | None,
               health: NodeHealth) -> PeriodicOutcome:
    """``out``, with a note when the textfile could not be published."""
    problem = None if publish is None else publish(health)
    if problem is None:
        return out
    return replace(out, message=f"{out.message}; textfile not written: {problem}",
                   textfile_error=problem)


def _deferred(f: Finding) -> str:
    return Severity.DRAIN_AFTER_JOB.value if f.severity is Severity.DRAIN_NOW else f.severity.value


def _pass_event(node: str, run: str, now: datetime, flags: int,
                snap: NodeSnapshot | None) -> HealthEvent:
    gpus = 0 if snap is None else len(snap.gpus)
    return HealthEvent(
        idempotency_key=derive_key("health_event", run, node, PASS_CHECK, None, 0), node=node,
        check_id=PASS_CHECK, severity="pass", observed_at=now,
        message=f"{node}: every health check passed on {gpus} GPU(s) ({flags} flag(s))",
        details={"hook": HOOK, "run": run, "gpus": gpus, "flags": flags})


def _slurm_view(slurm: SlurmClient, node: str) -> tuple[Node | None, list[Job] | None]:
    """This node as Slurm shows it and the jobs on it; None for what Slurm did not say."""
    me = _node_view(slurm, node)
    jobs = None
    try:
        jobs = jobs_on_node(slurm, node)
    except SlurmError as exc:
        log.warning("cannot list the jobs on %s: %s", node, exc)
    return me, jobs


def _node_view(slurm: SlurmClient, node: str) -> Node | None:
    """This node as Slurm shows it; None when Slurm did not say."""
    try:
        return next((n for n in slurm.list_nodes() if n.name == node), None)
    except SlurmError as exc:
        log.warning("cannot list nodes: %s", exc)
        return None


def _gpu_jobs(snap: NodeSnapshot, jobs: Sequence[Job] | None,
              procs: ProcessTable | None) -> dict[int, int]:
    """GPU index → the job running on it (see the module doc)."""
    running = {j.job_id for j in jobs or ()}
    out: dict[int, int] = {}
    for g in snap.gpus:
        owners: set[int] = set()
        for p in g.processes or ():
            if procs is not None:
                job = job_of(procs, p.pid)
                owners.update(() if job is None else (job,))
            elif len(running) == 1:
                owners.add(next(iter(running)))
        owners &= running
        if len(owners) == 1:
            out[g.index] = owners.pop()
    return out


def _orphan_events(snap: NodeSnapshot, jobs: Sequence[Job], procs: ProcessTable, *,
                   node: str, run: str, now: datetime) -> list[HealthEvent]:
    """One flag per GPU running live processes of no job on this node (see the module doc).
    A process of a job that runs elsewhere, or of no job at all, is an orphan here."""
    running = {j.job_id for j in jobs}
    out = []
    for g in snap.gpus:
        pids: list[int] = []
        users: set[str] = set()
        claimed: set[int] = set()
        for p in g.processes or ():
            if not procs.alive(p.pid):
                continue  # gone since the probe looked: nothing to report
            job = job_of(procs, p.pid)
            if job is not None and job in running:
                continue
            pids.append(p.pid)
            claimed.update(() if job is None else (job,))
            user = _user_of(procs, p.pid)
            users.update(() if user is None else (user,))
        if not pids:
            continue
        who = f" of {', '.join(sorted(users))}" if users else ""
        jobs_note = (f"; claim job(s) {', '.join(map(str, sorted(claimed)))} not running here"
                     if claimed else "")
        out.append(HealthEvent(
            idempotency_key=derive_key("health_event", run, node, ORPHAN_CHECK, g.index, 0),
            node=node, check_id=ORPHAN_CHECK, severity=Severity.FLAG.value, observed_at=now,
            gpu_index=g.index,
            message=(f"{node}: GPU {g.index} runs {len(pids)} process(es){who} of no job on "
                     f"this node: pid(s) {', '.join(map(str, sorted(pids)))}{jobs_note}"),
            details={"gpu": g.index, "pids": sorted(pids), "users": sorted(users),
                     "jobs": sorted(claimed), "hook": HOOK, "run": run}))
    return out


def _user_of(procs: ProcessTable, pid: int) -> str | None:
    """The user a process's environment names, if it has one (for the message only)."""
    env = procs.environ(pid) or {}
    return env.get("USER") or env.get("LOGNAME") or None


def _maybe_resume(me: Node, passed: bool, run: str, *, cfg: Config, slurm: SlurmClient,
                  rec: Recorder, now: datetime) -> tuple[str, str, int | None]:
    """An owned drain: resume after enough passes since slurm-ml drained it; (action,
    message, streak)."""
    node, need = me.name, cfg.policy.quarantine.resume_after_passes
    entries = rec.read("audit log", lambda s: s.audit_entries())
    drained_at = None if entries is None else last_drain_at(entries, node)
    if drained_at is None:
        why = "store unreadable" if entries is None else "no slurm-ml drain in the audit log"
        return "held", f"{node}: owned drain but {why}; not resuming", None
    events = rec.read("health events",
                      lambda s: s.recent_health_events(node, since=drained_at, limit=10_000))
    if events is None:
        return "held", f"{node}: health history unreadable; not resuming", None
    results = [*run_results(events, exclude_run=run), passed]
    streak = pass_streak(results)
    if not may_resume(me.reason, results, cfg.policy.quarantine):
        return "held", f"{node}: {streak}/{need} passes since the drain", streak
    try:
        slurm.resume_node(node)
    except SlurmError as exc:
        return "resume_failed", f"{node}: resume failed: {exc}", streak
    rec.write(AuditEntry(
        idempotency_key=derive_key("audit.resume", node, now), actor=f"slurm-ml/{HOOK}",
        action=RESUME, target=node, at=now,
        details={"reason": me.reason, "drained_at": drained_at.isoformat(), "streak": streak,
                 "required": need, "results": results[-max(need, streak):]}))
    return "resumed", f"{node}: resumed after {streak} passes ({me.reason})", streak
