"""Turn what Slurm and the store report into the value types the policies take (pure).

Billing: a job's GPUs count at their type's ``billing_weight`` (the same numbers the
rendered ``TRESBillingWeights`` use). A typed accounting entry (``gres/gpu:a100_80g``)
gives the type; GPUs accounted only as untyped ``gres/gpu`` are billed at weight 1.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime

from slurm_ml.config import Config, FairshareConfig
from slurm_ml.gres import tres_gpu_type
from slurm_ml.model import ALLOC_QOS, Job, JobState, JobUsage, Node, expand_hosts
from slurm_ml.policy.admission import contract_min_runtime_s
from slurm_ml.policy.admission.features import gpu_type_terms, parse_constraint
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.fairshare import Footprint, PendingJob, is_short_job
from slurm_ml.policy.fairshare.lane import LaneJob, is_short_work
from slurm_ml.policy.pending import ExcludedPending, code_of, wait_of, waits_for_gpus
from slurm_ml.policy.reclaim import CompletingJob, GpuSample, OrphanReport
from slurm_ml.policy.refunds import FaultDrain, Refund, refunds
from slurm_ml.store.records import AuditEntry, HealthEvent, ReconcilerDecision, UtilSample


def usage_billing_gpus(cfg: Config, u: JobUsage) -> float:
    """Billing GPUs of one accounted allocation."""
    typed = 0.0
    billing = 0.0
    for key, count in u.alloc_tres.items():
        name = tres_gpu_type(key)
        if name is not None:
            gpu_type = cfg.gpu_types.get(name)
            typed += count
            billing += count * (gpu_type.billing_weight if gpu_type else 1.0)
    untyped = u.alloc_tres.get("gres/gpu", 0.0) - typed
    return billing + max(0.0, untyped)


#: A Slurm host list as node names (the one reader, in the model layer).
expand = expand_hosts


def job_gpu_type(cfg: Config, job: Job, nodes: Sequence[str] | None = None) -> str | None:
    """The GPU type a running job got: its nodes' class, else the type it asked for."""
    for node in expand(job.nodes) if nodes is None else nodes:
        t = cfg.gpu_type_of_node(node)
        if t is not None:
            return t.name
    typed = {g.gpu_type for g in job.gpus if g.gpu_type}
    return typed.pop() if len(typed) == 1 else None


def acceptable_types(cfg: Config, job: Job) -> frozenset[str]:
    """GPU types a pending job may run on (empty = any): typed GRES, else the constraint."""
    typed = frozenset(g.gpu_type for g in job.gpus if g.gpu_type)
    if typed:
        return typed
    if not job.features:
        return frozenset()
    return _constraint_types(job.features, tuple((t.feature, n) for n, t in cfg.gpu_types.items()))


@functools.lru_cache(maxsize=4096)
def _constraint_types(features: str, feature_to_type: tuple[tuple[str, str], ...],
                      ) -> frozenset[str]:
    constraint = parse_constraint(features)
    if constraint is None:
        return frozenset()
    return gpu_type_terms(constraint, dict(feature_to_type))


def job_billing_gpus(cfg: Config, job: Job, gpu_type: str | None = None,
                     types: Iterable[str] = ()) -> float:
    """Billing GPUs of a job: its type's weight, or the highest of the types it accepts
    (any type, when it names none)."""
    names = [gpu_type] if gpu_type else (list(types) or list(cfg.gpu_types))
    weights = [cfg.gpu_types[n].billing_weight for n in names if n in cfg.gpu_types]
    return job.total_gpus * (max(weights) if weights else 1.0)


def footprints(cfg: Config, jobs: Sequence[Job], usage: Sequence[JobUsage],
               refunded: Collection[tuple[int, int]] = ()) -> list[Footprint]:
    """The window's allocations (from slurmdbd) plus the jobs pending now (from slurmctld)
    that wait for GPUs: a held, dependent or limit-blocked job is no demand.

    ``refunded``: (job id, start) of runs a fault ended (:func:`run_refunds`): they
    delivered nothing, though the team asked for GPUs all the same (demand stays)."""
    # sacct --truncate ends a run still going at the window's end (now): it has not
    # ended, and fair share counts it as running now (its GPUs, for the entitlement)
    out = [Footprint(job_id=u.job_id, account=u.account, user=u.user,
                     billing_gpus=usage_billing_gpus(cfg, u), allocated=u.qos == ALLOC_QOS,
                     pending_from=u.submit, run_from=u.start,
                     until=None if u.state == JobState.RUNNING else u.end)
           if (u.job_id, u.start) not in refunded else
           Footprint(job_id=u.job_id, account=u.account, user=u.user,
                     billing_gpus=usage_billing_gpus(cfg, u), allocated=u.qos == ALLOC_QOS,
                     pending_from=u.submit if u.submit is not None else u.start,
                     run_from=None, until=u.end)
           for u in usage if u.gpus > 0]
    for j in jobs:
        if j.state == JobState.PENDING and j.total_gpus > 0 and waits_for_gpus(j.reason):
            out.append(Footprint(job_id=j.job_id, account=j.account, user=j.user,
                                 billing_gpus=job_billing_gpus(cfg, j,
                                                               types=acceptable_types(cfg, j)),
                                 allocated=j.qos == ALLOC_QOS, pending_from=j.submit_time,
                                 run_from=None, until=None))
    return out


def fault_drains(entries: Iterable[AuditEntry]) -> list[FaultDrain]:
    """slurm-ml's health drains in the audit log (``drain`` by a hook, applied), as the
    refund rule reads them: an operator's drain or one that Slurm refused ends no job."""
    out = []
    for e in entries:
        hook = e.details.get("hook")
        if e.action != "drain" or not isinstance(hook, str) or e.details.get("applied") is False:
            continue
        job = e.details.get("job_id")
        findings = e.details.get("findings")
        checks = e.details.get("checks")
        names = checks if isinstance(checks, list) else [
            f.get("check_id") for f in findings if isinstance(f, dict)
        ] if isinstance(findings, list) else []
        reason = e.details.get("reason")
        out.append(FaultDrain(key=e.idempotency_key, node=e.target, at=_epoch(e.at), hook=hook,
                              job_id=job if isinstance(job, int) else None,
                              checks=tuple(dict.fromkeys(str(n) for n in names if n)),
                              reason=reason if isinstance(reason, str) else ""))
    return out


def repair_drains(decisions: Iterable[ReconcilerDecision]) -> list[FaultDrain]:
    """The daemon's requeues for a repair at the contract of a node with a finding, as
    drains naming the job (hook ``repair``): the fault ended that run. A requeue for an
    admin's maintenance is no fault and refunds nothing."""
    out = []
    for d in decisions:
        node, checks = d.details.get("node"), d.details.get("checks")
        if d.kind != "repair_requeue" or d.job_id is None or d.details.get("cause") != "finding":
            continue
        out.append(FaultDrain(key=d.idempotency_key, node=node if isinstance(node, str) else "",
                              at=_epoch(d.decided_at), hook="repair", job_id=d.job_id,
                              checks=tuple(str(c) for c in checks)
                              if isinstance(checks, list) else (),
                              reason=str(d.details.get("drain_reason") or "")))
    return out


def run_refunds(cfg: Config, usage: Sequence[JobUsage],
                drains: Sequence[FaultDrain]) -> list[Refund]:
    """The window's runs a slurm-ml drain ended (:mod:`slurm_ml.policy.refunds`); only
    charged (QOS alloc) runs: a free run costs its team nothing to refund."""
    if not drains:
        return []
    return refunds([u for u in usage if u.qos == ALLOC_QOS], drains,
                   lambda u: expand(u.nodes), lambda u: usage_billing_gpus(cfg, u),
                   cfg.policy.fairshare.refund_slack_s)


def pending_jobs(jobs: Sequence[Job], cfg: FairshareConfig) -> list[PendingJob]:
    """Pending jobs as fair share sees them (only those that wait for GPUs: the others
    are not ranked either); ``short`` from the recorded contract."""
    return [PendingJob(job_id=j.job_id, account=j.account, user=j.user, qos=j.qos,
                       nice=j.nice,
                       short=is_short_job(None if (s := protected_s(j)) is None else s / 60,
                                          j.time_limit_min, cfg))
            for j in jobs if j.state == JobState.PENDING and waits_for_gpus(j.reason)]


def lane_jobs(cfg: Config, jobs: Sequence[Job]) -> tuple[list[LaneJob], list[LaneJob]]:
    """Short alloc work the fast lane counts, as (pending, running): pending jobs that
    wait for GPUs (the ones :func:`pending_jobs` ranks) and running ones, each within
    ``policy.fast_lane.max_job_gpus``."""
    fcfg, most = cfg.policy.fairshare, cfg.policy.fast_lane.max_job_gpus
    pending: list[LaneJob] = []
    running: list[LaneJob] = []
    for j in jobs:
        if j.qos != ALLOC_QOS or not 0 < j.total_gpus <= most:
            continue
        if j.state == JobState.PENDING and not waits_for_gpus(j.reason):
            continue
        if j.state not in (JobState.PENDING, JobState.RUNNING):
            continue
        protected = protected_s(j)
        if not is_short_work(None if protected is None else protected / 60,
                             j.time_limit_min, fcfg):
            continue
        job = LaneJob(job_id=j.job_id, account=j.account, gpus=j.total_gpus,
                      submit=j.submit_time or 0, nice=j.nice)
        (pending if j.state == JobState.PENDING else running).append(job)
    return pending, running


def excluded_pending(cfg: Config, jobs: Sequence[Job]) -> list[ExcludedPending]:
    """Pending GPU jobs that are not demand, per association and Slurm reason code (what
    ``budget status`` shows apart from the pending GPUs it counts)."""
    acc: dict[tuple[str, str, str], tuple[int, int, float]] = {}
    for j in jobs:
        if j.state != JobState.PENDING or j.total_gpus <= 0 or waits_for_gpus(j.reason):
            continue
        key = (j.account, j.user, code_of(j.reason))
        n, g, b = acc.get(key, (0, 0, 0.0))
        acc[key] = (n + 1, g + j.total_gpus,
                    b + job_billing_gpus(cfg, j, types=acceptable_types(cfg, j)))
    return [ExcludedPending(account=a, user=u, reason=code, wait=wait_of(code), jobs=n,
                            gpus=g, billing_gpus=b)
            for (a, u, code), (n, g, b) in sorted(acc.items())]


def running_jobs(cfg: Config, jobs: Sequence[Job]) -> list[RunningJob]:
    out = []
    for j in jobs:
        if j.state != JobState.RUNNING or not j.start_time or j.total_gpus <= 0:
            continue
        names = expand(j.nodes)
        gpu_type = job_gpu_type(cfg, j, names)
        out.append(RunningJob(
            job_id=j.job_id, name=j.name, account=j.account, user=j.user, qos=j.qos,
            gpus=j.total_gpus, gpu_type=gpu_type,
            billing_gpus=job_billing_gpus(cfg, j, gpu_type), nodes=names,
            start=j.start_time, time_min_s=protected_s(j), requeue=j.requeue, batch=j.batch))
    return out


def protected_s(job: Job) -> int | None:
    """The job's minimum-runtime contract in seconds: what admission recorded in
    AdminComment, else Slurm's TimeMin (jobs admitted before the record existed)."""
    return contract_min_runtime_s(job.admin_comment, job.time_min_min)


def waiting_jobs(cfg: Config, jobs: Sequence[Job]) -> list[WaitingJob]:
    """Pending GPU jobs that wait for GPUs, in Slurm's order (highest priority first,
    then submit time)."""
    pending = [j for j in jobs if j.state == JobState.PENDING and j.total_gpus > 0
               and waits_for_gpus(j.reason)]
    pending.sort(key=lambda j: (-(j.priority or 0), j.submit_time or 0, j.job_id))
    out = []
    for order, j in enumerate(pending):
        types = acceptable_types(cfg, j)
        out.append(WaitingJob(
            job_id=j.job_id, account=j.account, user=j.user, qos=j.qos, gpus=j.total_gpus,
            gpu_types=types, billing_gpus=job_billing_gpus(cfg, j, types=types),
            submit=j.submit_time or 0, reason=j.reason, order=order))
    return out


def free_gpus(cfg: Config, nodes: Sequence[Node], running: Sequence[RunningJob]) -> dict[str, int]:
    """Idle GPUs per type on nodes that can take work (not drained, down or failing)."""
    busy: dict[str, int] = {}
    for r in running:
        per_node = r.gpus // max(1, len(r.nodes)) if r.nodes else 0
        for name in r.nodes:
            busy[name] = busy.get(name, 0) + per_node
    out: dict[str, int] = {}
    for node in nodes:
        node_class = cfg.node_class_of(node.name)
        if node_class is None or node.drained or node.state in _UNUSABLE \
                or "NOT_RESPONDING" in node.flags:
            continue
        total = node.gpus_total or node_class.gpus_per_node
        gtype = node_class.gpu_type
        out[gtype] = out.get(gtype, 0) + max(0, total - busy.get(node.name, 0))
    return out


_UNUSABLE = frozenset({"DOWN", "FAIL", "FUTURE", "UNKNOWN"})


def completing_jobs(jobs: Sequence[Job]) -> list[CompletingJob]:
    return [CompletingJob(job_id=j.job_id, nodes=expand(j.nodes), ended_at=j.end_time)
            for j in jobs if j.state == JobState.COMPLETING]


def _epoch(at: datetime) -> int:
    return int(at.timestamp())


def gpu_samples(samples: Mapping[int, Sequence[UtilSample]]) -> dict[int, list[GpuSample]]:
    return {job: [GpuSample(job_id=s.job_id, node=s.node, gpu=s.gpu_index, at=_epoch(s.sampled_at),
                            util_pct=s.util_pct, mem_mb=s.mem_used_mb) for s in rows]
            for job, rows in samples.items()}


def orphan_reports(events: Sequence[HealthEvent]) -> list[OrphanReport]:
    out = []
    for e in events:
        pids = e.details.get("pids")
        out.append(OrphanReport(
            node=e.node, at=_epoch(e.observed_at), gpu=e.gpu_index,
            pids=tuple(int(p) for p in pids if isinstance(p, int)) if isinstance(pids, list)
            else ()))
    return out
