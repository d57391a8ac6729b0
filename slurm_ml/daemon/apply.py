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
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from slurm_ml.daemon.plan import Action, Plan
from slurm_ml.model import JobState
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.errors import StoreError
from slurm_ml.store.protocol import Store, WriteOutcome
from slurm_ml.store.records import AuditEntry, ReconcilerDecision, derive_key

log = logging.getLogger(__name__)
ACTOR = "slurm-ml/daemon"


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
    site_factor_jobs: int = 0
    site_factor_calls: int = 0
    stopped: str = ""  # why the cycle stopped acting early ("" = it did not)

    def counts(self) -> dict[str, int]:
        return {"applied": len(self.applied), "already": len(self.already),
                "failed": len(self.failed), "would": len(self.would),
                "site_factor_jobs": self.site_factor_jobs}


def _at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _decision(plan: Plan, a: Action, *, dry_run: bool) -> ReconcilerDecision:
    details = {**a.details, "action": a.kind}
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
    """Applies plans against one Slurm and one store (a real one: never a spooling one)."""

    def __init__(self, slurm: SlurmClient, store: Store, *,
                 still_leader: Callable[[], bool] = lambda: True,
                 notify: Callable[[Action], None] | None = None,
                 after_intent: Callable[[Action], None] | None = None) -> None:
        self.slurm = slurm
        self.store = store
        self.still_leader = still_leader
        self.notify = notify
        self.after_intent = after_intent

    def apply(self, plan: Plan, *, dry_run: bool = False) -> ApplyReport:
        report = ApplyReport(cycle=plan.cycle, dry_run=dry_run)
        try:
            if dry_run:
                self._dry(plan, report)
            else:
                self._push_site_factors(plan, report)
                for action in plan.actions:
                    if not self.still_leader():
                        report.stopped = "lost the leader lock"
                        break
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
        intent = AuditEntry(idempotency_key=a.key, actor=ACTOR, action=a.decision,
                            target=a.target, at=_at(plan.now),
                            details={"phase": "intent", "reason": a.reason, "kind": a.kind,
                                     "cycle": plan.cycle})
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
        try:
            result = self._do(a)
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
        if "skipped" not in result:
            self.store.record_decision(_decision(plan, a, dry_run=False))
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

    def _do(self, a: Action) -> dict[str, object]:
        if a.kind == "requeue" and a.job_id is not None:
            # Slurm also requeues a job that finished or is completing, and runs it again:
            # check it still runs right before (a small race remains).
            now = self.slurm.list_jobs(job_ids=[a.job_id])
            if not any(j.state == JobState.RUNNING for j in now):
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
        elif a.kind == "warn":
            self._tell(a)
        else:
            raise ValueError(f"cannot apply action {a.kind!r}")  # a bug in plan, not input
        return {}

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
