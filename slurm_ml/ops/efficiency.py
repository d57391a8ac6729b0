"""``slurm-ml efficiency``: GPU-hours allocated, computing and idle over a time range, per
team (Slurm account), user or partition; the jobs that wasted most and how; and the
GPU-hours admission could widen because it had measured a job's memory.

Per job, sacct gives the allocation (GPUs x time inside the range). The figures come
from the summary the epilog kept in the job's AdminComment, else from the epilog's
per-GPU rows in PostgreSQL (mean utilisation only: no idle share). Each GPU's mean
utilisation and idle share stand for the whole run, applied to its time inside the
range:

* computing = GPU-hours x mean utilisation (what the GPUs' SMs were busy for);
* idle = GPU-hours x the share of samples at or below the idle threshold;
* not measured = the allocation's GPU-hours with neither (no sample, no epilog row).

Widened: GPU-hours of jobs whose admission record says admission widened their GPU
types on the measured peak memory of the user's earlier runs (``need_src`` profile):
they could start on a type they did not ask for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_ml.config import Config
from slurm_ml.model import JobAccounting
from slurm_ml.policy.admission.decision import read_record
from slurm_ml.policy.jobstats.judge import from_summary
from slurm_ml.policy.jobstats.notes import job_notes
from slurm_ml.policy.jobstats.summary import read_summary
from slurm_ml.policy.jobstats.usage import GpuUse, gpu_uses
from slurm_ml.store.records import JobGpuStats

GROUPINGS = ("team", "user", "partition")


@dataclass(slots=True)
class Tally:
    """GPU-hours of one group."""

    allocated: float = 0.0
    measured: float = 0.0
    computing: float = 0.0
    idle: float = 0.0  # where samples gave an idle share
    idle_measured: float = 0.0  # the GPU-hours whose idle share is known
    widened: float = 0.0
    jobs: int = 0

    def add(self, other: Tally) -> None:
        for name in ("allocated", "measured", "computing", "idle", "idle_measured", "widened",
                     "jobs"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def not_measured(self) -> float:
        return max(0.0, self.allocated - self.measured)


@dataclass(frozen=True, slots=True)
class JobWaste:
    job_id: int
    user: str
    account: str
    partition: str
    gpus: int
    tally: Tally
    how: tuple[str, ...]  # the jobstats note kinds that apply

    @property
    def wasted(self) -> float:
        """GPU-hours held but not computing, where measured."""
        return max(0.0, self.tally.measured - self.tally.computing)


@dataclass(frozen=True, slots=True)
class Efficiency:
    start: int
    end: int
    by: str
    groups: dict[str, Tally]
    total: Tally
    wasters: tuple[JobWaste, ...]
    gpu_jobs: int
    from_summary: int  # jobs whose figures came from their AdminComment summary
    from_store: int  # ... from the epilog's rows in PostgreSQL
    store_error: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _gpu_count(u: GpuUse) -> int:
    return -u.gpu if u.gpu < 0 else 1


def _tally(a: JobAccounting, uses: Sequence[GpuUse], widened: bool) -> Tally:
    hours = a.elapsed_s / 3600
    t = Tally(allocated=a.alloc_gpus * hours, jobs=1)
    for u in uses:
        if not u.measured:
            continue
        gh = _gpu_count(u) * hours
        t.measured += gh
        if u.mean_util_pct is not None:
            t.computing += gh * u.mean_util_pct / 100
        if u.idle_frac is not None:
            t.idle += gh * u.idle_frac
            t.idle_measured += gh
    t.measured = min(t.measured, t.allocated)
    if widened:
        t.widened = t.allocated
    return t


def _widened(admin_comment: str) -> bool:
    record = read_record(admin_comment)
    return bool(record and record.get("need_src") == "profile" and record.get("types"))


def _key(a: JobAccounting, by: str) -> str:
    return {"team": a.account, "user": a.user, "partition": a.partition}[by] or "(none)"


def _rows_as_uses(rows: Sequence[JobGpuStats], idle_pct: float) -> tuple[GpuUse, ...]:
    """The epilog's rows as figures (mean and peak memory, no samples); a requeued job
    has rows per run, and the newest run's count."""
    newest = {(r.node, r.gpu_index): (r.peak_mem_mb, r.mean_util_pct)
              for r in sorted(rows, key=lambda r: r.ended_at)}
    return gpu_uses([], idle_pct=idle_pct, epilog=newest)


def efficiency(jobs: Sequence[JobAccounting], rows: Mapping[int, Sequence[JobGpuStats]], *,
               cfg: Config, start: int, end: int, by: str, top: int = 10,
               store_error: str | None = None) -> Efficiency:
    """Tally GPU jobs in [start, end) per ``by`` (see the module doc)."""
    if by not in GROUPINGS:
        raise ValueError(f"by must be one of {', '.join(GROUPINGS)}, not {by!r}")
    rc = cfg.policy.reclaim
    groups: dict[str, Tally] = {}
    total = Tally()
    waste: list[JobWaste] = []
    n_summary = n_store = 0
    for a in jobs:
        if a.alloc_gpus <= 0 or a.elapsed_s <= 0:
            continue
        summary = read_summary(a.admin_comment)
        how: tuple[str, ...] = ()
        if summary is not None and summary.uses:
            n_summary += 1
            uses: Sequence[GpuUse] = summary.uses
            use = from_summary(summary, job_id=a.job_id, gpus=a.alloc_gpus, running=False,
                               gpu_type=a.gpu_type)
            how = tuple(n.kind for n in job_notes(
                use, idle_pct=rc.zombie_util_pct, heartbeat_s=rc.zombie_heartbeat_s,
                gpu_types=cfg.gpu_types, margin_pct=cfg.policy.admission.memory_margin_pct)
                if n.kind != "not_measured")
        elif rows.get(a.job_id):
            n_store += 1
            uses = _rows_as_uses(rows[a.job_id], rc.zombie_util_pct)
        else:
            uses = ()
        t = _tally(a, uses, _widened(a.admin_comment))
        groups.setdefault(_key(a, by), Tally()).add(t)
        total.add(t)
        waste.append(JobWaste(a.job_id, a.user, a.account, a.partition, a.alloc_gpus, t, how))
    wasters = tuple(sorted((w for w in waste if w.wasted > 0), key=lambda w: -w.wasted)[:top])
    return Efficiency(start=start, end=end, by=by, groups=groups, total=total, wasters=wasters,
                      gpu_jobs=total.jobs, from_summary=n_summary, from_store=n_store,
                      store_error=store_error)


# ---------------------------------------------------------------------- output

def _h(x: float) -> float:
    return round(x, 2)


def _tally_json(t: Tally) -> dict[str, Any]:
    return {"jobs": t.jobs, "allocated_gpu_h": _h(t.allocated), "measured_gpu_h": _h(t.measured),
            "computing_gpu_h": _h(t.computing), "idle_gpu_h": _h(t.idle),
            "idle_measured_gpu_h": _h(t.idle_measured),
            "not_measured_gpu_h": _h(t.not_measured), "widened_gpu_h": _h(t.widened),
            "computing_frac": (round(t.computing / t.measured, 3) if t.measured else None),
            "idle_frac": (round(t.idle / t.idle_measured, 3) if t.idle_measured else None)}


def efficiency_json(e: Efficiency) -> dict[str, Any]:
    return {
        "start": e.start, "end": e.end, "by": e.by, "gpu_jobs": e.gpu_jobs,
        "figures_from": {"admin_comment_summary": e.from_summary, "epilog_rows": e.from_store,
                         "none": e.gpu_jobs - e.from_summary - e.from_store},
        "total": _tally_json(e.total),
        "groups": [{"name": k, **_tally_json(v)} for k, v in
                   sorted(e.groups.items(), key=lambda kv: (-kv[1].allocated, kv[0]))],
        "wasters": [{"job_id": w.job_id, "user": w.user, "account": w.account,
                     "partition": w.partition, "gpus": w.gpus, "wasted_gpu_h": _h(w.wasted),
                     "idle_gpu_h": _h(w.tally.idle), "allocated_gpu_h": _h(w.tally.allocated),
                     "how": list(w.how)} for w in e.wasters],
        "store_error": e.store_error,
    }


_HOW = {"unused_gpus": "GPUs never used", "zombie": "zombie pattern",
        "gpu_memory": "GPU memory mostly unused", "data_starved": "data starvation",
        "cpu": "CPUs unused", "memory": "memory unused"}


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def efficiency_text(d: Mapping[str, Any]) -> str:
    lines = [f"GPU jobs {d['gpu_jobs']}; figures from the epilog's AdminComment summary: "
             f"{d['figures_from']['admin_comment_summary']}, from its rows in PostgreSQL: "
             f"{d['figures_from']['epilog_rows']}, none: {d['figures_from']['none']}"]
    if d["store_error"]:
        lines.append(f"PostgreSQL not read ({d['store_error']}): jobs without a summary "
                     f"count as not measured")
    head = (f"{d['by']:<20}{'jobs':>6}{'allocated':>11}{'computing':>11}{'idle':>9}"
            f"{'not meas.':>11}{'widened':>9}")
    lines += ["", "GPU-hours:", head]
    for g in [*d["groups"], {"name": "total", **d["total"]}]:
        alloc = g["allocated_gpu_h"]
        lines.append(f"{g['name'][:19]:<20}{g['jobs']:>6}{alloc:>11.1f}"
                     f"{g['computing_gpu_h']:>7.1f} {_pct(g['computing_gpu_h'], alloc):>3}"
                     f"{g['idle_gpu_h']:>9.1f}{g['not_measured_gpu_h']:>11.1f}"
                     f"{g['widened_gpu_h']:>9.1f}")
    lines += ["", "computing: GPU-hours x mean utilisation; idle: GPU-hours x share of samples "
                  "at or below the idle threshold; widened: GPU-hours of jobs admission "
                  "widened on measured memory"]
    if d["wasters"]:
        lines += ["", "Jobs that wasted most (GPU-hours held but not computing):"]
        for w in d["wasters"]:
            how = ", ".join(_HOW.get(h, h) for h in w["how"]) or "low utilisation"
            lines.append(f"  {w['job_id']:>10}  {w['user']:<12} {w['account']:<14} "
                         f"{w['gpus']:>3} GPUs  {w['wasted_gpu_h']:>8.1f} GPU-h  {how}")
        lines.append("  (slurm-ml jobstats JOBID for the evidence)")
    return "\n".join(lines)
