"""Per-job GPU usage records: JobGpuStats (epilog) and UtilSample (periodic).

The epilog sees the GPUs after the job's processes exited, so its own memory reading is
usually near zero: the peak it records is the largest of (the GPU's used memory now, the
job's processes' memory now, every UtilSample the periodic check or the daemon took of
that job on that GPU). The samples carry the true peak; without any, the row is a lower
bound. Mean utilisation is the mean of those samples, else the epilog's own reading
(0.0 when the probe read none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from slurm_ml.config import Config
from slurm_ml.health.snapshot import Gpu, NodeSnapshot, reading_number
from slurm_ml.model import GpuRequest
from slurm_ml.policy.cluster_jobs import RunningJob
from slurm_ml.policy.jobstats.judge import judge
from slurm_ml.policy.jobstats.usage import JobUse
from slurm_ml.policy.reclaim import GpuSample
from slurm_ml.store.records import JobGpuStats, UtilSample, derive_key

__all__ = ["JobInfo", "gpu_memory", "gpu_samples_of", "job_gpu_stats", "job_use",
           "util_samples"]


@dataclass(frozen=True, slots=True)
class JobInfo:
    job_id: int
    user: str
    name: str = ""
    account: str = ""
    started_at: datetime | None = None


def _pct(value: object) -> float | None:
    n = reading_number(value)
    return None if n is None else min(100.0, max(0.0, n))


def _job_mem(g: Gpu, pids: Iterable[int]) -> float | None:
    mine = set(pids)
    values = [reading_number(p.used_memory_mb) for p in g.processes or () if p.pid in mine]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def job_gpu_stats(snap: NodeSnapshot, job: JobInfo, gpus: Sequence[int], *,
                  job_pids: Iterable[int] = (), samples: Sequence[UtilSample] = (),
                  gpu_type: str | None = None, now: datetime) -> list[JobGpuStats]:
    """One row per job GPU that has any memory evidence (see the module doc)."""
    pids = list(job_pids)
    by_index = {g.index: g for g in snap.gpus}
    out = []
    for i in sorted(set(gpus)):
        mine = [s for s in samples if s.gpu_index == i and s.node == snap.node]
        g = by_index.get(i)
        mem = [float(s.mem_used_mb) for s in mine]
        if g is not None:
            readings = (reading_number(g.memory_used_mb), _job_mem(g, pids))
            mem += [m for m in readings if m is not None]
        if not mem:
            continue
        util = (sum(s.util_pct for s in mine) / len(mine) if mine
                else (_pct(g.utilization_gpu_pct) if g is not None else None))
        out.append(JobGpuStats(
            idempotency_key=derive_key("job_gpu_stats", job.job_id, snap.node, i),
            job_id=job.job_id, job_name=job.name, user=job.user, account=job.account,
            node=snap.node, gpu_index=i, peak_mem_mb=int(max(mem)),
            mean_util_pct=util if util is not None else 0.0, ended_at=now,
            started_at=job.started_at, gpu_type=gpu_type))
    return out


def util_samples(snap: NodeSnapshot, gpu_jobs: Mapping[int, int], *,
                 now: datetime) -> list[UtilSample]:
    """One sample per (GPU, job) in ``gpu_jobs`` (GPU index → job id) where the probe read
    utilisation and memory."""
    by_index = {g.index: g for g in snap.gpus}
    out = []
    for i, job_id in sorted(gpu_jobs.items()):
        g = by_index.get(i)
        util = None if g is None else _pct(g.utilization_gpu_pct)
        mem = None if g is None else reading_number(g.memory_used_mb)
        if util is None or mem is None:
            continue
        out.append(UtilSample(
            idempotency_key=derive_key("util_sample", job_id, snap.node, i, now),
            job_id=job_id, node=snap.node, gpu_index=i, sampled_at=now, util_pct=util,
            mem_used_mb=max(0, int(mem))))
    return out


def gpu_samples_of(rows: Iterable[UtilSample]) -> list[GpuSample]:
    """The store's samples as the policy reads them (epoch seconds)."""
    return [GpuSample(job_id=s.job_id, node=s.node, gpu=s.gpu_index,
                      at=int(s.sampled_at.timestamp()), util_pct=s.util_pct,
                      mem_mb=s.mem_used_mb) for s in rows]


def gpu_memory(cfg: Config, keys: Iterable[tuple[str, int]],
               snap: NodeSnapshot | None = None) -> dict[tuple[str, int], int]:
    """Each GPU's memory in MB: the probe's reading where ``snap`` has one, else its
    node's GPU type in the config."""
    out: dict[tuple[str, int], int] = {}
    if snap is not None:
        for g in snap.gpus:
            mb = reading_number(g.memory_total_mb)
            if mb is not None:
                out[(snap.node, g.index)] = int(mb)
    for key in keys:
        t = cfg.gpu_type_of_node(key[0]) if key not in out else None
        if t is not None:
            out[key] = int(t.memory_gb * 1024)
    return out


def job_use(job: RunningJob, cfg: Config, *, samples: Sequence[UtilSample],
            rows: Sequence[JobGpuStats], at: int, running: bool, elapsed_s: int | None,
            request: tuple[GpuRequest, ...] = (), snap: NodeSnapshot | None = None) -> JobUse:
    """The job's use judged from the store's records of it: its samples and the epilog's
    rows (``policy.jobstats.judge``), for the epilog's summary and for ``jobstats``."""
    keys = sorted({(r.node, r.gpu_index) for r in rows} | {(s.node, s.gpu_index)
                                                              for s in samples})
    return judge(job, gpu_samples_of(samples), cfg.policy.reclaim, at=at, running=running,
                 elapsed_s=elapsed_s, gpus=keys,
                 epilog={(r.node, r.gpu_index): (r.peak_mem_mb, r.mean_util_pct) for r in rows},
                 total_mem_mb=gpu_memory(cfg, keys, snap), request=request)
