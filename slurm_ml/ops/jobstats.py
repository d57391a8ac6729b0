"""``slurm-ml jobstats JOBID``: what one job used of what it held, and what to change.

The figures come from, in order: the job's utilisation samples and the epilog's rows in
PostgreSQL; else the summary the epilog left in its AdminComment (the samples expired,
or the database is not reachable from here); else nothing, and every figure says "not
measured". CPU and memory efficiency come from sacct, as seff computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from slurm_ml.config import Config
from slurm_ml.hooks.stats import job_use
from slurm_ml.model import Job, JobAccounting, JobState
from slurm_ml.policy.jobstats.judge import from_summary, running_job_of
from slurm_ml.policy.jobstats.notes import Note, job_notes
from slurm_ml.policy.jobstats.summary import read_summary
from slurm_ml.policy.jobstats.usage import CpuUse, GpuUse, JobUse
from slurm_ml.store.records import JobGpuStats, UtilSample


@dataclass(frozen=True, slots=True)
class JobStats:
    job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: str
    nodes: str
    start: int | None
    end: int | None
    use: JobUse
    notes: tuple[Note, ...]
    #: why the database's samples were not read (None: they were)
    store_error: str | None = None


def job_stats(job_id: int, *, cfg: Config, job: Job | None, acct: JobAccounting | None,
              samples: Sequence[UtilSample], rows: Sequence[JobGpuStats], now: int,
              store_error: str | None = None) -> JobStats:
    """Judge one job from what the CLI read (``job``: slurmctld's view, None once it
    forgot the job; ``acct``: slurmdbd's)."""
    running = job is not None and job.state in (JobState.RUNNING, JobState.SUSPENDED)
    rj = running_job_of(job_id, job, acct, now)
    end = None if running else (acct.end if acct and acct.end else
                                job.end_time if job is not None else None)
    elapsed = (now - rj.start if running else acct.elapsed_s if acct is not None else
               (end - rj.start if end else None))
    request = job.gpus if job is not None else ()
    rc = cfg.policy.reclaim
    use = job_use(rj, cfg, samples=samples, rows=rows, at=now if running else (end or now),
                  running=running, elapsed_s=elapsed, request=request)
    if not use.measured:
        comment = (acct.admin_comment if acct is not None and acct.admin_comment
                   else job.admin_comment if job is not None else "")
        summary = read_summary(comment)
        if summary is not None:
            use = from_summary(summary, job_id=job_id, gpus=rj.gpus, running=running,
                               nodes=max(1, len(rj.nodes)), gpu_type=rj.gpu_type)
            if request:
                use = replace(use, request=request)
    if acct is not None and not running:
        use = replace(use, cpu=CpuUse(elapsed_s=acct.elapsed_s, cpus=acct.alloc_cpus,
                                      total_cpu_s=acct.total_cpu_s, req_mem_mb=acct.req_mem_mb,
                                      max_rss_mb=acct.max_rss_mb))
    notes = job_notes(use, idle_pct=rc.zombie_util_pct, heartbeat_s=rc.zombie_heartbeat_s,
                      gpu_types=cfg.gpu_types, margin_pct=cfg.policy.admission.memory_margin_pct)
    state = job.state.value if job is not None else acct.state.value if acct else "UNKNOWN"
    return JobStats(job_id=job_id, name=rj.name, user=rj.user, account=rj.account,
                    partition=(job.partition if job else acct.partition if acct else ""),
                    state=state, nodes=",".join(rj.nodes), start=rj.start, end=end, use=use,
                    notes=tuple(notes), store_error=store_error)


# ---------------------------------------------------------------------- output

def _r(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


def _gpu_json(u: GpuUse, elapsed_s: int | None) -> dict[str, Any]:
    return {"node": u.node, "gpu": u.gpu if u.gpu >= 0 else None,
            "gpus": -u.gpu if u.gpu < 0 else 1, "samples": u.samples,
            "mean_util_pct": _r(u.mean_util_pct), "peak_util_pct": _r(u.peak_util_pct),
            "util_sd": _r(u.util_sd), "peak_mem_mb": u.peak_mem_mb,
            "total_mem_mb": u.total_mem_mb, "idle_frac": _r(u.idle_frac, 3),
            "idle_s": u.idle_s(elapsed_s)}


def jobstats_json(s: JobStats) -> dict[str, Any]:
    u = s.use
    cpu = u.cpu
    return {
        "job_id": s.job_id, "name": s.name, "user": s.user, "account": s.account,
        "partition": s.partition, "state": s.state, "running": u.running,
        "nodes": s.nodes, "start": s.start, "end": s.end, "elapsed_s": u.elapsed_s,
        "gpus": u.gpus, "gpu_type": u.gpu_type, "source": u.source,
        "gpu": [_gpu_json(g, u.elapsed_s) for g in u.uses],
        "gpus_not_measured": u.unmeasured_gpus,
        "zombie": None if u.zombie is None else {"idle_s": u.zombie.idle_s,
                                                 "mem_mb": u.zombie.mem_mb},
        "zombie_unjudged": u.zombie_unjudged,
        "cpu": None if cpu is None else {
            "cpus": cpu.cpus, "total_cpu_s": cpu.total_cpu_s,
            "cpu_eff": _r(cpu.cpu_eff, 3), "req_mem_mb": cpu.req_mem_mb,
            "max_rss_mb": cpu.max_rss_mb, "mem_eff": _r(cpu.mem_eff, 3)},
        "notes": [{"kind": n.kind, "text": n.text, "evidence": n.evidence} for n in s.notes],
        "store_error": s.store_error,
    }


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    return "not measured" if x is None else f"{x:{spec}}{unit}"


def _pct(frac: float | None) -> str:
    return "not measured" if frac is None else f"{frac * 100:.0f}%"


def _span(seconds: int | None) -> str:
    if seconds is None:
        return "not measured"
    if seconds < 60:
        return f"{seconds} s"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


_SOURCE = {"samples": "utilisation samples and the epilog's readings (PostgreSQL)",
           "summary": "the summary the epilog kept in the job's AdminComment",
           "none": "nothing: no samples, no epilog reading, no summary"}


def jobstats_text(data: dict[str, Any]) -> str:
    lines = [f"Job {data['job_id']} ({data['name']}) of {data['user']}, account "
             f"{data['account']}, partition {data['partition']}: {data['state']}",
             f"  {data['gpus']} GPU(s){' ' + data['gpu_type'] if data['gpu_type'] else ''} on "
             f"{data['nodes'] or 'no node'}, ran {_span(data['elapsed_s'])}"
             f"{' so far' if data['running'] else ''}",
             f"  GPU figures from {_SOURCE.get(data['source'], data['source'])}"]
    if data["store_error"]:
        lines.append(f"  samples not read: {data['store_error']}")
    lines.append("")
    if data["gpu"]:
        lines.append(f"  {'GPU':<16}{'samples':>8}{'mean':>8}{'peak':>8}{'memory peak':>22}"
                     f"{'idle':>18}")
        for g in data["gpu"]:
            name = (f"{g['node']} GPU {g['gpu']}" if g["gpu"] is not None
                    else f"{g['node']} ({g['gpus']} GPUs)")
            mem = ("not measured" if g["peak_mem_mb"] is None else
                   f"{g['peak_mem_mb'] / 1024:.1f}" + (
                       f" / {g['total_mem_mb'] / 1024:.0f} GB" if g["total_mem_mb"] else " GB"))
            idle = ("not measured" if g["idle_frac"] is None else
                    f"{g['idle_frac'] * 100:.0f}% ({_span(g['idle_s'])})")
            lines.append(f"  {name:<16}{g['samples']:>8}{_fmt(g['mean_util_pct'], '.0f', '%'):>8}"
                         f"{_fmt(g['peak_util_pct'], '.0f', '%'):>8}{mem:>22}{idle:>18}")
    if data["gpus_not_measured"]:
        lines.append(f"  {data['gpus_not_measured']} GPU(s): not measured")
    cpu = data["cpu"]
    if cpu is None:
        lines.append("  CPU and memory efficiency: " + (
            "when the job has ended (sacct)" if data["running"] else "not measured (no sacct "
                                                                    "record)"))
    else:
        cpus = f"{cpu['cpus']} CPU{'' if cpu['cpus'] == 1 else 's'}"
        lines.append(f"  CPU efficiency: {_pct(cpu['cpu_eff'])} ({cpus});  "
                     f"memory efficiency: {_pct(cpu['mem_eff'])}")
        if cpu["cpu_eff"] is None and cpu["mem_eff"] is None:
            lines.append("    (Slurm recorded no CPU time or memory for the job's steps: "
                         "the cluster's JobAcctGatherType gathers none)")
    lines.append("")
    if data["notes"]:
        lines.append("Notes:")
        for n in data["notes"]:
            lines.append(f"  * {n['text']}")
            lines.append(f"    (evidence: {n['evidence']})")
    else:
        lines.append("Notes: none: no check found anything to change.")
    return "\n".join(lines)
