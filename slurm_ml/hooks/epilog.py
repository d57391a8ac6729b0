"""The Slurm Epilog: leave the node clean, record what the job used, check it again.

1. Snapshot every GPU (under ``prolog_budget_s``, in a thread with a deadline).
2. Kill the job's leftover GPU processes (cgroup or SLURM_JOB_ID, never the user):
   SIGTERM, wait, SIGKILL, re-check. A survivor is a ``process.leftover`` drain. Without
   a snapshot (probe timed out) there is no GPU process list: nothing is killed, and
   Slurm's proctrack has already ended the job's tasks. Then record the job's per-GPU
   stats (``hooks.stats``: the true peak comes from the utilisation samples) and write
   its efficiency summary into its AdminComment (``hooks.job_summary``), which
   ``slurm-ml jobstats`` reads once the samples are gone.
3. Post-job checks on the job's GPUs, against the counters the prolog saved: a pending
   remap or page retirement (DRAIN_AFTER_JOB), a lifetime uncorrectable ECC delta during
   the job, or any drain-now finding drains the node *now*, through the breaker.
4. /dev/shm: remove the user's files only if the user has no other job on the node.

The epilog ALWAYS exits 0. A failing epilog makes Slurm drain the node itself, with a
reason slurm-ml does not own and past the circuit breaker; every drain the epilog wants
is made explicitly through the breaker instead.
"""

from __future__ import annotations

import logging
import pwd
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from slurm_ml.config import Config
from slurm_ml.health.checks import Finding, Severity, Thresholds, check_node
from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.snapshot import NodeSnapshot
from slurm_ml.hooks.baseline import load_baseline
from slurm_ml.hooks.breaker import DrainAction, drain_via_breaker
from slurm_ml.hooks.common import DEFAULT_THRESHOLDS, jobs_on_node, node_expectations
from slurm_ml.hooks.deadline import take_snapshot
from slurm_ml.hooks.job_summary import SummaryWrite, write_summary
from slurm_ml.hooks.jobenv import JobEnv, JobEnvError, job_env
from slurm_ml.hooks.kill import KillResult, gpu_pids, kill_job_processes
from slurm_ml.hooks.procs import ProcessTable
from slurm_ml.hooks.record import Recorder, finding_events, run_key
from slurm_ml.hooks.shm import ShmResult, clean_shm
from slurm_ml.hooks.stats import JobInfo, job_gpu_stats
from slurm_ml.model import Job
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.protocol import Store

__all__ = ["EpilogOutcome", "run_epilog"]

log = logging.getLogger(__name__)
HOOK = "epilog"
#: Flagged by the checks, but drained after a job (the issue: "an ECC delta ... means
#: drain after the job"): the lifetime uncorrectable counter grew while the job ran.
_AFTER_JOB = frozenset({"ecc.aggregate_uncorrected"})


@dataclass(frozen=True, slots=True)
class EpilogOutcome:
    exit_code: int  # always 0, see the module doc
    action: str  # skipped | clean | recorded | drained | already_drained | refused | ...
    message: str
    findings: tuple[Finding, ...] = ()
    kill: KillResult = field(default_factory=KillResult)
    drain: DrainAction | None = None
    shm: ShmResult | None = None
    stats_recorded: int = 0
    store_errors: tuple[str, ...] = ()
    summary: SummaryWrite | None = None


def run_epilog(env: Mapping[str, str], *, cfg: Config, probe: GpuProbe, slurm: SlurmClient,
               store: Store, procs: ProcessTable, now: datetime,
               sleep: Callable[[float], None] = time.sleep, shm_dir: Path = Path("/dev/shm"),
               term_wait_s: float = 5.0, kill_wait_s: float = 2.0,
               thresholds: Thresholds = DEFAULT_THRESHOLDS, baseline_dir: Path | None = None,
               xid_since: float | None = None) -> EpilogOutcome:
    """Clean up after one job and check its GPUs; see the module doc. ``xid_since``:
    judge only Xids logged after this time (the node's previous hook run)."""
    try:
        job = job_env(env)
    except JobEnvError as exc:
        return EpilogOutcome(0, "skipped", str(exc))
    if job.job_id is None:
        return EpilogOutcome(0, "skipped", "SLURM_JOB_ID is not set")
    rec = Recorder(store)
    known = node_expectations(cfg, job.node)
    snap, failure = take_snapshot(probe, job.node, None, cfg.policy.quarantine.prolog_budget_s)
    pids = gpu_pids(snap) if snap is not None else {}
    kill = kill_job_processes(pids, job.job_id, procs, sleep=sleep, term_wait_s=term_wait_s,
                              kill_wait_s=kill_wait_s)
    slurm_job = _lookup(job.job_id, slurm)
    info = _job_info(job, slurm_job)
    stats, summary = 0, None
    if info is not None and job.gpus:
        samples = rec.read("util samples", lambda s: s.util_samples_for(info.job_id)) or []
        gpu_type = None if known is None else known[0].gpu_type
        rows = (job_gpu_stats(snap, info, job.gpus, job_pids=kill.targets, samples=samples,
                              gpu_type=gpu_type, now=now) if snap is not None else [])
        stats = rec.write_all(rows)
        summary = write_summary(job.job_id, job.node, cfg=cfg, slurm=slurm, snap=snap,
                                samples=samples, stats=rows, job=slurm_job, now=now,
                                sleep=sleep)
    findings = [failure] if failure is not None else []
    if snap is not None and known is not None:
        previous = (load_baseline(baseline_dir, job.job_id, job.node)
                    if baseline_dir is not None else None)
        findings = [_after_job(f) for f in check_node(snap, known[1], thresholds,
                                                      gpus=job.gpus, previous=previous,
                                                      xid_since=xid_since)]
    findings = _survivors(kill, pids, job.job_id, snap) + findings
    run = run_key(HOOK, job.node, job.job_id, now)
    rec.write_all(finding_events(findings, hook=HOOK, node=job.node, run=run,
                                 job_id=job.job_id, now=now))
    drain = None
    if known is not None and any(f.severity.drains for f in findings):
        drain = drain_via_breaker(job.node, findings, cfg=cfg, slurm=slurm, rec=rec, now=now,
                                  hook=HOOK, job_id=job.job_id)
    shm = _shm(job, info, slurm, shm_dir)
    action = drain.outcome if drain is not None else "recorded" if findings else "clean"
    message = (f"{job.node} job {job.job_id}: {action}; killed {len(kill.targets)} GPU "
               f"process(es), {len(kill.survivors)} survived; shm "
               f"{'removed ' + str(len(shm.removed)) if shm.ran else 'skipped: ' + shm.why}"
               f"{'; summary ' + str(summary) if summary is not None else ''}")
    return EpilogOutcome(0, action, message, tuple(findings), kill, drain, shm, stats,
                         tuple(rec.errors), summary)


def _after_job(f: Finding) -> Finding:
    return replace(f, severity=Severity.DRAIN_AFTER_JOB) if f.check_id in _AFTER_JOB else f


def _survivors(kill: KillResult, pids: Mapping[int, tuple[int, ...]], job_id: int,
               snap: NodeSnapshot | None) -> list[Finding]:
    """One process.leftover drain finding per GPU that still runs a surviving pid."""
    per_gpu: dict[int | None, list[int]] = {}
    for pid in kill.survivors:
        for gpu in pids.get(pid, ()) or (None,):
            per_gpu.setdefault(gpu, []).append(pid)
    node = snap.node if snap is not None else "the node"
    return [Finding(
        "process.leftover", Severity.DRAIN_NOW, gpu,
        f"{'GPU ' + str(gpu) if gpu is not None else 'A GPU'} on {node} still runs "
        f"{len(alive)} process(es) of finished job {job_id} after SIGKILL (pid "
        f"{', '.join(map(str, alive))}); they are stuck in the driver: drain, reboot, resume.",
        {"job_id": job_id, "pids": alive}, f"{len(alive)} pids survived SIGKILL")
        for gpu, alive in sorted(per_gpu.items(), key=lambda kv: -1 if kv[0] is None else kv[0])]


def _lookup(job_id: int, slurm: SlurmClient) -> Job | None:
    """The job as slurmctld still holds it (COMPLETING while the epilog runs)."""
    try:
        found = slurm.list_jobs(job_ids=[job_id])
    except SlurmError as exc:
        log.warning("cannot look up job %s: %s", job_id, exc)
        return None
    return next((j for j in found if j.job_id == job_id), None)


def _job_info(job: JobEnv, j: Job | None) -> JobInfo | None:
    """Name, user and account from the environment, else from Slurm."""
    assert job.job_id is not None
    started = (datetime.fromtimestamp(j.start_time, UTC)
               if j is not None and j.start_time is not None else None)
    if job.user is not None and job.name is not None and job.account is not None:
        return JobInfo(job.job_id, job.user, job.name, job.account, started)
    user = job.user or (j.user if j is not None else None)
    if not user:
        return None
    return JobInfo(job.job_id, user, job.name or (j.name if j else ""),
                   job.account or (j.account if j else ""), started)


def _shm(job: JobEnv, info: JobInfo | None, slurm: SlurmClient, shm_dir: Path) -> ShmResult:
    user = info.user if info is not None else job.user
    uid = job.uid if job.uid is not None else _uid(user)
    if user is None or uid is None:
        return ShmResult(False, "the job's user is unknown")
    try:
        others = jobs_on_node(slurm, job.node, users=[user], exclude=[job.job_id or -1])
    except SlurmError as exc:
        return ShmResult(False, f"cannot tell whether {user} has other jobs here: {exc}")
    if others:
        ids = ", ".join(str(j.job_id) for j in others)
        return ShmResult(False, f"{user} still has job(s) {ids} on {job.node}")
    return clean_shm(shm_dir, uid)


def _uid(user: str | None) -> int | None:
    if user is None:
        return None
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None
