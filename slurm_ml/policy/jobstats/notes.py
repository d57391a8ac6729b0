"""The plain notes ``jobstats`` gives a researcher: what to change, in their own flags,
and the evidence each rests on. A note needs its evidence: a GPU with no samples is
"not measured", never "idle".

Thresholds, and why:

* unused GPU: at or below ``policy.reclaim.zombie_util_pct`` (the zombie rule's idle) in
  every one of at least ``MIN_SAMPLES`` samples: one busy sample means it did work;
* GPU memory: the peak at most half the GPU's memory, and a smaller type in the config
  with room for the peak plus admission's ``memory_margin_pct``;
* data starvation: at least ``STARVED_MIN_SAMPLES`` samples spread by at least
  ``STARVED_SD`` points with the GPU idle in 15-85 % of them: a job sawing between busy and
  idle (0/100 alternating is 50 points), not one that is merely light;
* CPU and memory below a quarter of the request, as seff users read them, on requests
  big enough that asking for less frees something (2+ CPUs, 4+ GB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ClusterShell.RangeSet import RangeSet

from slurm_ml.model import GpuRequest, GpuType
from slurm_ml.policy.jobstats.usage import GpuUse, JobUse, gb_ceil

MIN_SAMPLES = 3
STARVED_MIN_SAMPLES = 10
STARVED_SD = 30.0
STARVED_IDLE = (0.15, 0.85)
LOW_EFF = 0.25
MEM_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Note:
    """One thing to change (or a figure that is missing), and what it rests on."""

    kind: str  # unused_gpus | zombie | gpu_memory | data_starved | cpu | memory | not_measured
    text: str
    evidence: str


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def gpu_list(uses: Sequence[GpuUse]) -> str:
    """``gpu01 GPUs 2-7, gpu02 GPU 0``: the GPUs folded per node."""
    nodes: dict[str, list[int]] = {}
    for u in uses:
        nodes.setdefault(u.node, []).append(u.gpu)
    parts = []
    for node, idx in sorted(nodes.items()):
        folded = str(RangeSet.fromlist([str(i) for i in sorted(idx)]))
        parts.append(f"{node} GPU{'s' if len(idx) > 1 else ''} {folded.replace(',', ', ')}")
    return ", ".join(parts)


def gpu_flag(request: Sequence[GpuRequest], gpus: int, nodes: int) -> str:
    """``gpus`` GPUs in the flag the job's request used (Slurm keeps the scope, not the
    spelling: a per-node count is --gres=gpu:N or --gpus-per-node=N)."""
    req = request[0] if len(request) == 1 else None
    typed = f"{req.gpu_type}:" if req is not None and req.gpu_type else ""
    if req is None or req.per == "node":
        per = max(1, math.ceil(gpus / max(1, nodes)))
        where = " per node" if nodes > 1 else ""
        return f"--gres=gpu:{typed}{per} (or --gpus-per-node={typed}{per}){where}"
    if req.per == "job":
        return f"--gpus={typed}{gpus}"
    if req.per == "task":
        return f"fewer tasks (-n) or --gpus-per-task, for {gpus} GPUs in all"
    return f"--gpus-per-socket with {gpus} GPUs in all"


def _span(seconds: float) -> str:
    if seconds < 60:
        return f"{round(seconds)} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _held(job: JobUse) -> str:
    return "holds" if job.running else "held"


def _unused(job: JobUse, idle_pct: float) -> Note | None:
    idle = [u for u in job.measured if u.samples >= MIN_SAMPLES
            and u.peak_util_pct is not None and u.peak_util_pct <= idle_pct]
    if not idle:
        return None
    fewest = min(u.samples for u in idle)
    used = job.gpus - len(idle)
    did = "has not used" if job.running else "did not use"
    text = (f"This job {did} {len(idle)} of its {job.gpus} GPUs ({gpu_list(idle)}): "
            f"their utilisation stayed at or below {idle_pct:g}% in every sample.")
    if used > 0:
        text += (f" Ask for {used}: {gpu_flag(job.request, used, job.nodes)}; "
                 f"or make the program use every GPU it asks for (torchrun --nproc-per-node, "
                 f"one rank per GPU).")
    else:
        text += " If it needs no GPU, submit it without --gres/--gpus."
    return Note("unused_gpus", text,
                f"utilisation samples: at least {fewest} per idle GPU, none above "
                f"{idle_pct:g}%")


def _zombie(job: JobUse, heartbeat_s: float) -> Note | None:
    z = job.zombie
    if z is None:
        return None
    return Note(
        "zombie",
        f"Every GPU of this job {_held(job)} {z.mem_mb} MB of memory with no compute "
        f"for {_span(z.idle_s)}: the pattern slurm-ml reclaims as a zombie after "
        f"{_span(heartbeat_s)} (a warning, then requeue or cancel). A hung rank or "
        f"one waiting on a dead peer looks like this: make the program exit on errors "
        f"(e.g. a collective timeout) and cancel a stuck run (scancel {job.job_id}).",
        "the zombie rule over the utilisation samples: every GPU idle, memory held")


def _gpu_memory(job: JobUse, gpu_types: Mapping[str, GpuType], margin_pct: float) -> Note | None:
    measured = [u for u in job.measured if u.peak_mem_mb is not None]
    totals = [u.total_mem_mb for u in measured if u.total_mem_mb]
    if not measured or len(totals) < len(measured) or not any(u.samples for u in measured):
        return None
    peak = max(u.peak_mem_mb or 0 for u in measured)
    total = min(totals)
    if peak > MEM_SHARE * total:
        return None
    need_gb = gb_ceil(peak * (1 + margin_pct / 100))
    smaller = [t.name for t in gpu_types.values() if need_gb <= t.memory_gb < total / 1024]
    if not smaller:
        return None
    return Note(
        "gpu_memory",
        f"Its GPUs' memory peaked at {peak / 1024:.1f} GB of {total / 1024:.0f} GB. Add "
        f"--comment gpu_mem={need_gb}G and admission may also start it on "
        f"{', '.join(smaller)} (enough memory with its {margin_pct:g}% margin), which are "
        f"often free sooner.",
        f"peak GPU memory over {sum(u.samples for u in measured)} samples and the epilog's "
        f"reading, against each GPU's memory")


def _starved(job: JobUse) -> Note | None:
    lo, hi = STARVED_IDLE
    saw = [u for u in job.measured if u.samples >= STARVED_MIN_SAMPLES and u.util_sd is not None
           and u.util_sd >= STARVED_SD and u.idle_frac is not None and lo <= u.idle_frac <= hi]
    if not saw:
        return None
    sd = max(u.util_sd or 0.0 for u in saw)
    idle = max(u.idle_frac or 0.0 for u in saw)
    return Note(
        "data_starved",
        f"Utilisation swings between busy and idle on {_plural(len(saw), 'GPU')} "
        f"({gpu_list(saw)}): the GPUs wait for input. More data-loader workers (and "
        f"--cpus-per-task for them), pinned memory, or data staged on node-local disk keep "
        f"them fed.",
        f"utilisation samples spread by up to {sd:.0f} points, idle in up to "
        f"{idle * 100:.0f}% of them")


def _cpu(job: JobUse) -> list[Note]:
    c = job.cpu
    out: list[Note] = []
    if c is None:
        return out
    eff = c.cpu_eff
    if eff is not None and eff < LOW_EFF and c.cpus >= 2:
        want = max(1, math.ceil(c.cpus * eff * 1.25))
        out.append(Note(
            "cpu", f"CPU efficiency {eff * 100:.0f}% of {c.cpus} CPUs: about {want} would "
                   f"do (-c/--cpus-per-task, or fewer tasks with -n).",
            "sacct TotalCPU / (Elapsed x AllocCPUS)"))
    mem = c.mem_eff
    if mem is not None and mem < LOW_EFF and (c.req_mem_mb or 0) >= 4096:
        want_gb = gb_ceil((c.max_rss_mb or 0) * 1.25)
        out.append(Note(
            "memory", f"Memory peaked at {(c.max_rss_mb or 0) / 1024:.1f} GB of the "
                      f"{(c.req_mem_mb or 0) / 1024:.0f} GB requested: --mem={want_gb}G "
                      f"would do.", "sacct MaxRSS (largest step) / ReqMem"))
    return out


def _not_measured(job: JobUse) -> Note | None:
    if job.gpus <= 0:
        return None
    missing = job.unmeasured_gpus
    if missing <= 0:
        return None
    if missing >= job.gpus:
        return Note("not_measured",
                    "GPU use: not measured. slurm-ml has no utilisation sample, no epilog "
                    "reading and no summary for this job, so it cannot say how its GPUs "
                    "were used.",
                    "no samples in the store, no epilog row, no summary in AdminComment")
    return Note("not_measured",
                f"{missing} of its {job.gpus} GPUs: not measured (no sample or epilog "
                f"reading); the notes speak for the {job.gpus - missing} measured ones.",
                "GPUs of the allocation without a sample or epilog row")


def job_notes(job: JobUse, *, idle_pct: float, heartbeat_s: float,
              gpu_types: Mapping[str, GpuType], margin_pct: float) -> list[Note]:
    """Every note for ``job``, most costly first: GPUs not used, then zombie, memory,
    starvation, CPU and memory, then what was not measured."""
    notes = [_unused(job, idle_pct), _zombie(job, heartbeat_s),
             _gpu_memory(job, gpu_types, margin_pct), _starved(job)]
    out = [n for n in notes if n is not None] + _cpu(job)
    nm = _not_measured(job)
    return [*out, nm] if nm is not None else out
