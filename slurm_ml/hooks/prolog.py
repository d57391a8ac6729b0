"""The Slurm Prolog: prove the job's GPUs healthy before the job starts.

Exit code contract (slurmd acts on it, docs/design.md "Prolog failure"):

* 0: the job may start. Also whenever slurm-ml did not take the node out of service:
  a failing prolog makes Slurm drain the node itself ("Prolog error"), which would
  bypass the circuit breaker and leave a drain slurm-ml does not own.
* 1: a drain-now finding, and the node is out of service: slurm-ml drained it (reason
  ``slurm-ml: <check> gpu<N> ...``, which Slurm keeps), or it was already drained, or
  the breaker allowed the drain but the Slurm call failed (Slurm's own "Prolog error"
  drain is then the fallback: the job must not start on a GPU known to be bad). Slurm
  requeues the job elsewhere (``SchedulerParameters=nohold_on_prolog_fail``).

Budget: the probe runs under ``policy.quarantine.prolog_budget_s`` in a thread with a
deadline, so a hung NVML cannot hang slurmd. Slurm calls are bounded by the client's own
timeout: the CLI must build the hook's SlurmClient with a short one (~5 s), and the
store with a short connect timeout, wrapped in a SpoolingStore. Set
``PrologEpilogTimeout`` above budget + 2 Slurm timeouts. Store failures never fail the
prolog (``Recorder``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from slurm_ml.config import Config
from slurm_ml.health.checks import Finding, Severity, Thresholds, check_node
from slurm_ml.health.probe import GpuProbe
from slurm_ml.hooks.baseline import save_baseline
from slurm_ml.hooks.breaker import DrainAction, drain_via_breaker
from slurm_ml.hooks.common import DEFAULT_THRESHOLDS, node_expectations
from slurm_ml.hooks.deadline import take_snapshot
from slurm_ml.hooks.jobenv import JobEnvError, job_env
from slurm_ml.hooks.record import Recorder, finding_events, run_key
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.protocol import Store

__all__ = ["PrologOutcome", "run_prolog"]

log = logging.getLogger(__name__)
HOOK = "prolog"


@dataclass(frozen=True, slots=True)
class PrologOutcome:
    """``action``: skipped | pass | recorded (findings, none drains now) | drained |
    already_drained | refused (breaker) | drain_failed."""

    exit_code: int
    action: str
    message: str
    findings: tuple[Finding, ...] = ()
    drain: DrainAction | None = None
    store_errors: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    node: str = ""
    job_id: int | None = None
    gpus: tuple[int, ...] | None = field(default=None)


def run_prolog(env: Mapping[str, str], *, cfg: Config, probe: GpuProbe, slurm: SlurmClient,
               store: Store, now: datetime, thresholds: Thresholds = DEFAULT_THRESHOLDS,
               xid_since: float | None = None, baseline_dir: Path | None = None
               ) -> PrologOutcome:
    """Check the job's GPUs and drain the node (through the breaker) on a drain-now
    finding; see the module doc for the exit code. ``xid_since``: ignore Xids logged
    before this time (the node's last epilog); ``baseline_dir``: where to leave the job's
    start counters for the epilog (None: no ECC/NVLink deltas at the epilog)."""
    start = time.monotonic()
    try:
        job = job_env(env)
    except JobEnvError as exc:
        return PrologOutcome(0, "skipped", str(exc))
    known = node_expectations(cfg, job.node)
    if known is None:
        return PrologOutcome(0, "skipped", f"{job.node} is in no slurm-ml node class",
                             node=job.node, job_id=job.job_id, gpus=job.gpus)
    _, exp = known
    budget = cfg.policy.quarantine.prolog_budget_s
    snap, failure = take_snapshot(probe, job.node, job.gpus, budget)
    findings = (check_node(snap, exp, thresholds, gpus=job.gpus, xid_since=xid_since)
                if snap is not None else [failure] if failure is not None else [])
    rec = Recorder(store)
    run = run_key(HOOK, job.node, job.job_id, now)
    rec.write_all(finding_events(findings, hook=HOOK, node=job.node, run=run,
                                 job_id=job.job_id, now=now))
    if baseline_dir is not None and snap is not None and job.job_id is not None:
        try:
            save_baseline(baseline_dir, job.job_id, snap)
        except OSError as exc:
            log.warning("cannot save the GPU baseline of job %s: %s", job.job_id, exc)

    def done(code: int, action: str, message: str, drain: DrainAction | None = None
             ) -> PrologOutcome:
        return PrologOutcome(code, action, message, tuple(findings), drain,
                             tuple(rec.errors), time.monotonic() - start, job.node,
                             job.job_id, job.gpus)

    if not any(f.severity is Severity.DRAIN_NOW for f in findings):
        if not findings:
            return done(0, "pass", f"{job.node}: GPUs {_gpus(job.gpus)} healthy")
        return done(0, "recorded", f"{job.node}: {len(findings)} finding(s), none drains "
                                   f"now ({findings[0].check_id})")
    act = drain_via_breaker(job.node, findings, cfg=cfg, slurm=slurm, rec=rec, now=now,
                            hook=HOOK, job_id=job.job_id)
    action = "drain_failed" if act.outcome == "failed" else act.outcome
    code = 1 if act.node_out_of_service else 0
    return done(code, action, f"{job.node}: {act.reason} -> {action} ({act.explanation})",
                act)


def _gpus(gpus: tuple[int, ...] | None) -> str:
    return "all" if gpus is None else ",".join(map(str, gpus)) or "none"
