"""What a job used: per GPU from its utilisation samples (and the epilog's reading), and
CPU and memory from Slurm's accounting.

A GPU with no sample and no epilog row is *not measured*: its figures are None, never 0.
Utilisation samples come from the periodic health check (``sample_interval_s`` apart),
so time figures are estimates: a GPU idle in 3 of 12 samples was idle about a quarter of
the time the job held it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_ml.model import GpuRequest
from slurm_ml.policy.reclaim import GpuSample, gpu_name

GpuKey = tuple[str, int]  # (node, GPU index)


@dataclass(frozen=True, slots=True)
class GpuUse:
    """One GPU a job held, as measured. None = not measured."""

    node: str
    gpu: int
    samples: int  # utilisation samples behind the figures; 0 = the epilog's reading only
    mean_util_pct: float | None
    peak_util_pct: float | None
    util_sd: float | None  # spread of the samples in percentage points (None under 2)
    peak_mem_mb: int | None
    total_mem_mb: int | None  # the GPU's memory, where the probe or the config says it
    idle_frac: float | None  # share of the samples at or below the idle threshold

    @property
    def name(self) -> str:
        return gpu_name(self.node, self.gpu)

    @property
    def measured(self) -> bool:
        return self.mean_util_pct is not None or self.peak_mem_mb is not None

    def idle_s(self, elapsed_s: int | None) -> int | None:
        """Seconds idle, estimated as the idle share of the samples times the run."""
        if self.idle_frac is None or elapsed_s is None:
            return None
        return round(self.idle_frac * elapsed_s)


@dataclass(frozen=True, slots=True)
class CpuUse:
    """CPU and memory from sacct. ``total_cpu_s`` None: Slurm gathered no CPU time
    (JobAcctGatherType=jobacct_gather/none reports 0 for every job, so 0 with no
    MaxRSS on any step is read as not measured)."""

    elapsed_s: int
    cpus: int
    total_cpu_s: float | None
    req_mem_mb: int | None
    max_rss_mb: int | None

    @property
    def cpu_eff(self) -> float | None:
        """TotalCPU / (elapsed x CPUs), as seff computes it."""
        if self.total_cpu_s is None or self.elapsed_s <= 0 or self.cpus <= 0:
            return None
        return self.total_cpu_s / (self.elapsed_s * self.cpus)

    @property
    def mem_eff(self) -> float | None:
        """MaxRSS / requested memory."""
        if self.max_rss_mb is None or not self.req_mem_mb:
            return None
        return self.max_rss_mb / self.req_mem_mb


@dataclass(frozen=True, slots=True)
class ZombieShape:
    """The zombie rule's verdict on the job's samples: every GPU idle with memory held."""

    idle_s: int
    mem_mb: int


@dataclass(frozen=True, slots=True)
class JobUse:
    """Everything the notes judge, for one job (running or ended)."""

    job_id: int
    gpus: int  # GPUs the job holds or held (its allocation)
    running: bool
    elapsed_s: int | None
    uses: tuple[GpuUse, ...]
    cpu: CpuUse | None = None
    zombie: ZombieShape | None = None
    #: why the zombie rule gave no verdict on the samples (None: it gave one, or no
    #: samples were there to judge)
    zombie_unjudged: str | None = None
    request: tuple[GpuRequest, ...] = ()  # the GPU request as Slurm holds it
    nodes: int = 1
    gpu_type: str | None = None
    source: str = "samples"  # samples | summary (AdminComment) | none

    @property
    def measured(self) -> tuple[GpuUse, ...]:
        return tuple(u for u in self.uses if u.measured)

    @property
    def unmeasured_gpus(self) -> int:
        """The allocation's GPUs with no figure (a summary row folded per node, ``gpu``
        below 0, stands for that many GPUs)."""
        return max(0, self.gpus - sum(-u.gpu if u.gpu < 0 else 1 for u in self.measured))


def _sd(values: Sequence[float]) -> float | None:
    return statistics.pstdev(values) if len(values) >= 2 else None


def gpu_uses(samples: Sequence[GpuSample], gpus: Sequence[GpuKey] = (), *, idle_pct: float,
             epilog: Mapping[GpuKey, tuple[int, float]] | None = None,
             total_mem_mb: Mapping[GpuKey, int] | None = None) -> tuple[GpuUse, ...]:
    """One GpuUse per GPU in ``gpus``, in the samples or in the epilog's rows
    (``epilog``: (node, GPU) → (peak memory MB, mean utilisation %)), sorted.

    The samples decide utilisation; the epilog row adds its memory reading to the peak,
    and gives the mean only where no sample exists (one reading after the job ended).
    """
    epilog = epilog or {}
    total_mem_mb = total_mem_mb or {}
    by: dict[GpuKey, list[GpuSample]] = {}
    for s in samples:
        by.setdefault((s.node, s.gpu), []).append(s)
    out = []
    for key in sorted(set(gpus) | set(by) | set(epilog)):
        rows = by.get(key, [])
        utils = [s.util_pct for s in rows]
        mems = [s.mem_mb for s in rows]
        ep = epilog.get(key)
        if ep is not None:
            mems.append(ep[0])
        mean = statistics.fmean(utils) if utils else (ep[1] if ep is not None else None)
        out.append(GpuUse(
            node=key[0], gpu=key[1], samples=len(rows), mean_util_pct=mean,
            peak_util_pct=max(utils) if utils else None, util_sd=_sd(utils),
            peak_mem_mb=max(mems) if mems else None, total_mem_mb=total_mem_mb.get(key),
            idle_frac=(sum(1 for u in utils if u <= idle_pct) / len(utils)) if utils else None))
    return tuple(out)


def mb_to_gb(mb: float) -> float:
    return mb / 1024


def gb_ceil(mb: float) -> int:
    """Whole GB at or above ``mb`` (what ``gpu_mem=`` takes)."""
    return max(1, math.ceil(mb / 1024))
