"""A job's use judged from its samples: the figures per GPU and the zombie rule's verdict.

The zombie verdict is the daemon's own (``reclaim.zombie_status``), taken at the job's
end for an ended job and now for a running one, so jobstats never calls a job a zombie
on evidence the daemon would not act on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_ml.config import ReclaimConfig
from slurm_ml.model import GpuRequest, Job, JobAccounting, expand_hosts
from slurm_ml.policy.cluster_jobs import RunningJob
from slurm_ml.policy.jobstats.summary import Summary
from slurm_ml.policy.jobstats.usage import GpuKey, GpuUse, JobUse, ZombieShape, gpu_uses
from slurm_ml.policy.reclaim import GpuSample, zombie_status


def running_job_of(job_id: int, job: Job | None, acct: JobAccounting | None,
                   now: int) -> RunningJob:
    """The job as the zombie rule reads it, from slurmdbd's record of its allocation
    (``acct``) where there is one, else slurmctld's (``job``); QOS, requeue and batch
    only slurmctld knows."""
    gpus = (acct.alloc_gpus if acct is not None else 0) or (
        job.total_gpus if job is not None else 0)
    nodes = (acct.nodes if acct is not None and acct.nodes else
             job.nodes if job is not None else "")
    start = ((acct.start if acct is not None else None)
             or (job.start_time if job is not None else None) or now)
    named = acct if acct is not None else job
    return RunningJob(
        job_id=job_id, name=named.name if named else "",
        account=named.account if named else "", user=named.user if named else "",
        qos=job.qos if job is not None else "", gpus=gpus,
        gpu_type=acct.gpu_type if acct is not None else None, billing_gpus=0.0,
        nodes=expand_hosts(nodes), start=start, time_min_s=None,
        requeue=job.requeue if job is not None else False,
        batch=job.batch if job is not None else True)


def zombie_shape(job: RunningJob, samples: Sequence[GpuSample], cfg: ReclaimConfig, *,
                 at: int) -> tuple[ZombieShape | None, str | None]:
    """(the zombie shape, None) when the rule finds one at ``at``; (None, why) when the
    samples cannot carry a verdict; (None, None) otherwise."""
    status = zombie_status(at, job, samples, cfg)
    if status.state == "zombie" and status.span is not None:
        return ZombieShape(status.span.idle_s, status.span.mem_mb), None
    if status.state == "no_verdict":
        return None, status.text
    return None, None


def judge(job: RunningJob, samples: Sequence[GpuSample], cfg: ReclaimConfig, *, at: int,
          running: bool, elapsed_s: int | None, gpus: Sequence[GpuKey] = (),
          epilog: Mapping[GpuKey, tuple[int, float]] | None = None,
          total_mem_mb: Mapping[GpuKey, int] | None = None,
          request: tuple[GpuRequest, ...] = ()) -> JobUse:
    """The job's use from its samples (and the epilog's rows)."""
    mine = [s for s in samples if s.job_id == job.job_id and s.at >= job.start]  # this run
    uses = gpu_uses(mine, gpus, idle_pct=cfg.zombie_util_pct, epilog=epilog,
                    total_mem_mb=total_mem_mb)
    zombie, unjudged = (zombie_shape(job, mine, cfg, at=at) if mine else (None, None))
    return JobUse(job_id=job.job_id, gpus=job.gpus, running=running, elapsed_s=elapsed_s,
                  uses=uses, zombie=zombie, zombie_unjudged=unjudged, request=request,
                  nodes=max(1, len(job.nodes)), gpu_type=job.gpu_type,
                  source="samples" if any(u.measured for u in uses) else "none")


def from_summary(summary: Summary, *, job_id: int, gpus: int, running: bool,
                 nodes: int = 1, gpu_type: str | None = None) -> JobUse:
    """The JobUse an AdminComment summary keeps (its rows per node, where it had to fold
    them, count each node's GPUs as measured)."""
    uses: tuple[GpuUse, ...] = summary.uses
    return JobUse(job_id=job_id, gpus=gpus, running=running, elapsed_s=summary.elapsed_s,
                  uses=uses, zombie=summary.zombie, zombie_unjudged=summary.zombie_unjudged,
                  request=summary.request, nodes=nodes, gpu_type=gpu_type, source="summary")


def to_summary(use: JobUse, *, at: int) -> Summary:
    return Summary(at=at, uses=use.uses, elapsed_s=use.elapsed_s, zombie=use.zombie,
                   zombie_unjudged=use.zombie_unjudged, request=use.request)
