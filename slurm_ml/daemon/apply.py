"""Apply: carry a ``Plan`` out, recording each action before doing it.

For every action an audit *intent* keyed by the action's idempotency key is written
first; only a write that lands lets the action run, and a ``<key>/done`` audit row and
the decision row (what ``why``, cooldowns and grace periods read) follow it. So:

* the database down → nothing is applied (we do not act what we cannot record);
* a crash after the intent → the restart finds the intent (a duplicate write) and, as
  the plan re-derived the action from live state, finishes it only if no ``/done`` row
  exists; an action whose effect is visible (job requeued, node drained) is not
  re-planned at all, so nothing is ever applied twice;
* losing the leader lock stops the cycle before the next action.

SiteFactor pushes are idempotent (only changed values are pushed) and are recorded as
one decision per cycle rather than one row per job.

A requeue lets the job checkpoint first (``policy.contracts.requeue_*``), in two phases
across cycles, because the grace (a minute or more) is as long as a cycle and the loop
must not stop deciding for it: the first cycle records a ``requeue_signal`` decision and
*then* sends the signal (so a crash never signals twice); every later cycle reads those
decisions back and, once the grace has passed, requeues the job's same run, whether or
not the plan still asks for it (so a crash, or the job waking up, never forgets the
requeue). The audit rows ``<key>``, ``<key>/signal`` and ``<key>/done`` are one action.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slurm_ml.config.schema import ContractsConfig, signal_name
from slurm_ml.daemon.plan import (
    PREEMPT_KIND,
    SIGNAL_KIND,
    Action,
    Plan,
    action_json,
    signalled_action,
)
from slurm_ml.model import Job, JobState
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.errors import StoreError
from slurm_ml.store.protocol import Store, WriteOutcome
from slurm_ml.store.records import AuditEntry, ReconcilerDecision, derive_key

log = logging.getLogger(__name__)
ACTOR = "slurm-ml/daemon"
#: (``SIGNAL_KIND``, from plan: the decision of a checkpoint signal sent ahead of a
#: requeue; ``why`` shows it and ``plan.ledger`` counts it until the requeue's own.)
#: How long past its grace a signalled requeue is still finished (a daemon down that long).
PENDING_LOOKBACK_S = 86400
#: Ended states in which a signalled job is requeued all the same: it most likely ended of
#: the signal (a shell that does not trap it dies), and Slurm re-runs an ended batch job.
#: Not CANCELLED: someone ended it on purpose.
_RERUN_ENDED = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT,
                          JobState.OUT_OF_MEMORY})


class NotRecorded(Exception):
    """The store did not take an intent; the cycle stops acting."""


@dataclass(slots=True)
class ApplyReport:
    cycle: int
    dry_run: bool
    applied: list[Action] = field(default_factory=list)
    already: list[Action] = field(default_factory=list)  # done in an earlier cycle / run
    failed: list[tuple[Action, str]] = field(default_factory=list)
    would: list[Action] = field(default_factory=list)  # dry run
    signalled: list[Action] = field(default_factory=list)  # signalled now; requeue later
    waiting: list[Action] = field(default_factory=list)  # signalled earlier, grace running
    site_factor_jobs: int = 0
    site_factor_calls: int = 0
    stopped: str = ""  # why the cycle stopped acting early ("" = it did not)

    def counts(self) -> dict[str, int]:
        return {"applied": len(self.applied), "already": len(self.already),
                "failed": len(self.failed), "would": len(self.would),
                "signalled": len(self.signalled), "waiting": len(self.waiting),
                "site_factor_jobs": self.site_factor_jobs}


def _at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _decision(plan: Plan, a: Action, *, dry_run: bool,
              extra: dict[str, object] | None = None) -> ReconcilerDecision:
    details = {**a.details, **(extra or {}), "action": a.kind}
    if a.node:
        details["node"] = a.node
    return ReconcilerDecision(idempotency_key=a.key + ("/dry" if dry_run else ""), cycle=plan.cycle,
                              job_id=a.job_id, kind=a.decision, reason=a.reason,
                              decided_at=_at(plan.now), dry_run=dry_run, details=details)


def _landed(outcome: WriteOutcome) -> bool:
    if outcome is WriteOutcome.SPOOLED:
        raise NotRecorded("the store spooled the intent instead of recording it")
    return outcome is WriteOutcome.LANDED


class Applier:
    """Applies plans against one Slurm and one store (a real one: never a spooling one).

    ``contracts`` holds the checkpoint-signal knobs; without it requeues are plain ones.
    ``lane_grace_s``: the grace of the fast lane's requeues (``lane_requeue``), which a
    debug job waits through; None: the contracts' grace.
    """

    def __init__(self, slurm: SlurmClient, store: Store, *,
                 still_leader: Callable[[], bool] = lambda: True,
                 notify: Callable[[Action], None] | None = None,
                 after_intent: Callable[[Action], None] | None = None,
                 contracts: ContractsConfig | None = None,
                 lane_grace_s: float | None = None) -> None:
        self.slurm = slurm
        self.store = store
        self.still_leader = still_leader
        self.notify = notify
        self.after_intent = after_intent
        self.contracts = contracts
        self.lane_grace_s = lane_grace_s

    def grace_for(self, a: Action) -> float:
        """Seconds between the checkpoint signal and the requeue of ``a`` (0: a plain
        requeue)."""
        if self.contracts is None or a.decision == PREEMPT_KIND:  # its grace was Slurm's
            return 0.0
        if a.decision == "lane_requeue" and self.lane_grace_s is not None:
            return self.lane_grace_s
        return self.contracts.requeue_grace_s

    @property
    def signalling(self) -> bool:
        """Whether any requeue is signalled first (so signals may be in flight)."""
        return self.contracts is not None and self._longest_grace() > 0

    def _longest_grace(self) -> float:
        assert self.contracts is not None
        return max(self.contracts.requeue_grace_s, self.lane_grace_s or 0.0)

    def apply(self, plan: Plan, *, dry_run: bool = False) -> ApplyReport:
        report = ApplyReport(cycle=plan.cycle, dry_run=dry_run)
        try:
            if dry_run:
                self._dry(plan, report)
            else:
                self._push_site_factors(plan, report)
                flight = self._in_flight(plan)
                planned = {a.key for a in plan.actions}
                # signalled in an earlier cycle and no longer planned: still requeued
                todo: list[tuple[Action, ReconcilerDecision | None]] = [
                    (signalled_action(d), d) for k, d in flight.items() if k not in planned]
                todo += [(a, flight.get(a.key)) for a in plan.actions]
                for action, signalled in todo:
                    if not self.still_leader():
                        report.stopped = "lost the leader lock"
                        break
                    if signalled is not None:
                        self._finish(plan, action, signalled, report)
                    else:
                        self._one(plan, action, report)
        except (StoreError, NotRecorded) as exc:
            report.stopped = f"store: {exc}"
            log.error("cycle=%d event=apply_stopped reason=store error=%s", plan.cycle, exc)
        # Admission reads them: a dry run or a deposed leader must not change what it sees.
        if not dry_run and not report.stopped and self.still_leader():
            self._snapshots(plan)
        return report

    # ------------------------------------------------------------------ pieces

    def _dry(self, plan: Plan, report: ApplyReport) -> None:
        for action in plan.actions:
            self.store.record_decision(_decision(plan, action, dry_run=True))
            report.would.append(action)
            log.info("cycle=%d event=would_%s job=%s node=%s reason=%s", plan.cycle,
                     action.kind, action.job_id, action.node, json.dumps(action.reason))
        report.site_factor_jobs = len(plan.changed)

    def _push_site_factors(self, plan: Plan, report: ApplyReport) -> None:
        if not plan.changed:
            return
        if not self.still_leader():
            report.stopped = "lost the leader lock"
            return
        values = sorted(set(plan.changed.values()))
        _landed(self.store.record_decision(ReconcilerDecision(
            idempotency_key=derive_key("daemon.site_factor", plan.cycle, sorted(plan.changed)),
            cycle=plan.cycle, job_id=None, kind="site_factor", decided_at=_at(plan.now),
            reason=f"SiteFactor changed for {len(plan.changed)} pending job(s)",
            dry_run=False, details={"jobs": len(plan.changed), "values": values[:50]})))
        try:
            report.site_factor_calls = self.slurm.set_site_factor(plan.changed)
            report.site_factor_jobs = len(plan.changed)
        except SlurmError as exc:
            log.warning("cycle=%d event=site_factor_failed jobs=%d error=%s", plan.cycle,
                        len(plan.changed), exc)

    def _one(self, plan: Plan, a: Action, report: ApplyReport) -> None:
        details: dict[str, Any] = {"phase": "intent", "reason": a.reason, "kind": a.kind,
                                   "cycle": plan.cycle}
        if a.kind == "requeue" and self.grace_for(a) > 0:
            details["grace_s"] = self.grace_for(a)
        intent = AuditEntry(idempotency_key=a.key, actor=ACTOR, action=a.decision,
                            target=a.target, at=_at(plan.now), details=details)
        if not _landed(self.store.audit(intent)):
            done = self.store.audit_by_keys([f"{a.key}/done"])
            if done:
                # keyed, so a no-op unless an earlier write of it was lost
                self.store.record_decision(_decision(plan, a, dry_run=False))
                report.already.append(a)
                log.info("cycle=%d event=already_applied key=%s job=%s node=%s", plan.cycle,
                         a.key, a.job_id, a.node)
                return
            log.warning("cycle=%d event=finishing_interrupted key=%s job=%s node=%s",
                        plan.cycle, a.key, a.job_id, a.node)
        if self.after_intent is not None:
            self.after_intent(a)
        if a.kind == "requeue" and a.job_id is not None and self.grace_for(a) > 0:
            job = self._still_running(a.job_id)
            sig = self._signal_for(a.job_id) if job is not None else None
            if job is not None and sig is not None:
                self._signal(plan, a, job, sig, report)
                return
            self._act(plan, a, report, checked=job is not None)
            return
        self._act(plan, a, report)

    def _act(self, plan: Plan, a: Action, report: ApplyReport, *,
             extra: dict[str, object] | None = None, checked: bool = False) -> None:
        """Do ``a`` now and record it done (a requeue: at once, or at the end of its grace);
        ``checked``: the caller has just seen that the job may be requeued."""
        try:
            result = self._do(a, checked=checked)
        except SlurmError as exc:
            report.failed.append((a, str(exc)))
            log.warning("cycle=%d event=%s_failed job=%s node=%s error=%s", plan.cycle, a.kind,
                        a.job_id, a.node, exc)
            self.store.audit(AuditEntry(
                idempotency_key=f"{a.key}/failed/{plan.cycle}", actor=ACTOR,
                action=f"{a.decision}.failed", target=a.target, at=_at(plan.now),
                details={"error": str(exc)[:500]}))
            return
        # The decision row is what `why`, the requeue cooldown and the zombie grace read:
        # it says the action happened, so it follows the action, and comes before /done so
        # that an action marked done always has its decision. A skipped action (the job
        # ended meanwhile) has none.
        result = {**(extra or {}), **result}
        if "skipped" not in result:
            self.store.record_decision(_decision(plan, a, dry_run=False, extra=extra))
        self.store.audit(AuditEntry(
            idempotency_key=f"{a.key}/done", actor=ACTOR, action=a.decision, target=a.target,
            at=_at(plan.now), details={"phase": "done", "reason": a.reason, **result}))
        if "skipped" in result:
            report.already.append(a)
            log.info("cycle=%d event=%s_skipped job=%s why=%s", plan.cycle, a.decision,
                     a.job_id, result["skipped"])
            return
        report.applied.append(a)
        log.info("cycle=%d event=%s job=%s node=%s reason=%s", plan.cycle, a.decision,
                 a.job_id, a.node, json.dumps(a.reason))

    def _do(self, a: Action, *, checked: bool = False) -> dict[str, object]:
        if a.kind == "requeue" and a.job_id is not None:
            # Slurm also requeues a job that finished or is completing, and runs it again:
            # check it still runs right before (a small race remains).
            now = [] if checked else self.slurm.list_jobs(job_ids=[a.job_id])
            if not checked and not any(j.state == JobState.RUNNING for j in now):
                state = now[0].state.value if now else "gone"
                return {"skipped": f"job no longer running ({state})"}
            self.slurm.requeue([a.job_id])
            self._tell(a)
        elif a.kind == "cancel" and a.job_id is not None:
            self.slurm.cancel([a.job_id])
            self._tell(a)
        elif a.kind == "drain" and a.node:
            self.slurm.drain_node(a.node, a.reason)
        elif a.kind == "fix_runaway":
            return {"fixed": self.slurm.fix_runaway_jobs()}
        elif a.kind == "refund":
            return dict(a.details)  # nothing to do in Slurm: the record is the refund
        elif a.kind == "warn":
            self._tell(a)
        else:
            raise ValueError(f"cannot apply action {a.kind!r}")  # a bug in plan, not input
        return {}

    # ------------------------------------------------------------ checkpoint signals

    def _in_flight(self, plan: Plan) -> dict[str, ReconcilerDecision]:
        """Requeues signalled in an earlier cycle (or run) and not done, by action key."""
        if self.contracts is None or not self.signalling:
            return {}
        since = plan.now - int(self._longest_grace()) - PENDING_LOOKBACK_S
        rows = {d.idempotency_key.removesuffix("/signal"): d
                for d in self.store.decisions_since(_at(since), kinds=[SIGNAL_KIND])
                if not d.dry_run}
        done = self.store.audit_by_keys([f"{k}/done" for k in rows])
        return {k: d for k, d in rows.items() if f"{k}/done" not in done}

    def _still_running(self, job_id: int) -> Job | None:
        return next((j for j in self.slurm.list_jobs(job_ids=[job_id])
                     if j.state == JobState.RUNNING), None)

    def _signal_for(self, job_id: int) -> tuple[str, str, str] | None:
        """(signal, target, source): the job's own --signal, else the configured one."""
        assert self.contracts is not None
        try:
            own = self.slurm.job_signal(job_id)
        except SlurmError as exc:  # unreadable: the default is the next best thing
            log.info("job=%d event=job_signal_unknown error=%s", job_id, exc)
            own = None
        if own is not None:
            return own.signal, own.target, "job"
        default = signal_name(self.contracts.requeue_signal)
        if default is None:
            return None  # "" = no default: a job that asked for nothing is requeued at once
        return default, self.contracts.requeue_signal_target, "config"

    def _signal(self, plan: Plan, a: Action, job: Job, sig: tuple[str, str, str],
                report: ApplyReport) -> None:
        """Phase one: record the signal, then send it; a later cycle requeues."""
        assert self.contracts is not None and a.job_id is not None
        signal, target, source = sig
        grace = self.grace_for(a)
        after = plan.now + int(grace)
        facts: dict[str, Any] = {"signal": signal, "target": target, "source": source,
                                 "grace_s": grace, "signalled_at": plan.now,
                                 "requeue_after": after, "start_time": job.start_time}
        # Recorded before it is sent: a crash in between loses one signal, never sends two.
        self.store.record_decision(ReconcilerDecision(
            idempotency_key=f"{a.key}/signal", cycle=plan.cycle, job_id=a.job_id,
            kind=SIGNAL_KIND, decided_at=_at(plan.now), dry_run=False,
            reason=f"sent SIG{signal} to job {a.job_id} ({target}) so that it can checkpoint; "
                   f"it is requeued {grace:g} s later ({a.decision}: {a.reason})",
            details={**facts, "for": a.decision, "action": action_json(a)}))
        error = ""
        try:
            self.slurm.signal_job(a.job_id, signal, target=target)
        except SlurmError as exc:  # the requeue still comes: the job was chosen either way
            error = str(exc)[:500]
            log.warning("cycle=%d event=requeue_signal_failed job=%d signal=%s error=%s",
                        plan.cycle, a.job_id, signal, exc)
        self.store.audit(AuditEntry(
            idempotency_key=f"{a.key}/signal", actor=ACTOR, action=a.decision, target=a.target,
            at=_at(plan.now), details={"phase": "signal", **facts,
                                       **({"error": error} if error else {})}))
        report.signalled.append(a)
        log.info("cycle=%d event=requeue_signalled job=%d signal=%s target=%s source=%s "
                 "requeue_after=%d", plan.cycle, a.job_id, signal, target, source, after)

    def _finish(self, plan: Plan, a: Action, signalled: ReconcilerDecision,
                report: ApplyReport) -> None:
        """Phase two: once the grace has passed, requeue the run that was signalled."""
        facts = {k: signalled.details.get(k) for k in
                 ("signal", "target", "source", "grace_s", "signalled_at", "requeue_after")}
        after = int(signalled.details.get("requeue_after", 0))
        if plan.now < after:
            report.waiting.append(a)
            return
        assert a.job_id is not None
        jobs = self.slurm.list_jobs(job_ids=[a.job_id])
        job = jobs[0] if jobs else None
        same_run = job is not None and job.start_time == signalled.details.get("start_time")
        signalled_at = int(signalled.details.get("signalled_at") or after)
        extra: dict[str, object] = {**facts, "waited_s": plan.now - signalled_at}
        if job is not None and same_run and (job.state == JobState.RUNNING
                                             or job.state in _RERUN_ENDED):
            if job.state != JobState.RUNNING:
                extra["ended_after_signal"] = job.state.value
            self._act(plan, a, report, extra=extra, checked=True)
            return
        if job is not None and same_run and job.state == JobState.COMPLETING:
            report.waiting.append(a)  # its run is ending: requeue it once it has ended
            return
        if job is not None and (not same_run or job.state == JobState.PENDING):
            # it requeued itself on the signal (Lightning, submitit do): done, and it counts
            # as this requeue for the cooldown and the cap
            extra["requeued_by"] = "the job itself"
            self.store.record_decision(_decision(plan, a, dry_run=False, extra=extra))
            self._done(plan, a, extra)
            report.applied.append(a)
            log.info("cycle=%d event=%s_by_job job=%d", plan.cycle, a.decision, a.job_id)
            return
        state = job.state.value if job is not None else "gone"
        self._done(plan, a, {**extra, "skipped": f"job no longer running ({state})"})
        report.already.append(a)
        log.info("cycle=%d event=%s_skipped job=%d why=ended_after_signal state=%s",
                 plan.cycle, a.decision, a.job_id, state)

    def _done(self, plan: Plan, a: Action, details: dict[str, object]) -> None:
        self.store.audit(AuditEntry(
            idempotency_key=f"{a.key}/done", actor=ACTOR, action=a.decision, target=a.target,
            at=_at(plan.now), details={"phase": "done", "reason": a.reason, **details}))

    def _tell(self, a: Action) -> None:
        """Slurm has no channel to a job's owner: the site's notify hook is the one."""
        if self.notify is not None:
            self.notify(a)

    def _snapshots(self, plan: Plan) -> None:
        try:
            for snap in plan.snapshots:
                self.store.record_budget_snapshot(snap)
        except StoreError as exc:
            log.warning("cycle=%d event=snapshots_not_recorded error=%s", plan.cycle, exc)
