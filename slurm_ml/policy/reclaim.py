"""Reclamation: capacity held but not used, taken back with a warning first.

* Zombie jobs (research §3.2): GPU memory held *and* utilisation ~0 on every GPU of the
  job for a heartbeat. Princeton's job_defense_shield looks at utilisation only; memory
  held is what tells a hung or forgotten process from a job that has not started its GPU
  work yet. The user is warned, and after a grace period the job is requeued when it is
  resumable, else cancelled. A verdict rests only on samples that cover the whole
  heartbeat window on every GPU of the job, with no gap longer than twice the sampling
  interval (``sample_interval_s``, the periodic health check's): two readings 19 minutes
  apart say nothing about the minutes between. Missing, gappy or stale samples never lead
  to a verdict, and :func:`zombie_status` says why: acting on the absence of evidence
  would punish jobs for the sampler's faults.
* Jobs stuck COMPLETING (Slurm's own UnkillableStepTimeout idea): their nodes are drained
  with an owned reason, so the node gets looked at instead of taking new jobs.
* Orphan GPU processes reported by health (pitt-crc shinigami's rule): the node is
  drained with an owned reason; a GPU with a stray process is not fit for the next job.

Pure: ``now`` (epoch seconds), the jobs, samples and reports come in as values.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_ml.config import ReclaimConfig
from slurm_ml.model import Node
from slurm_ml.policy.cluster_jobs import RunningJob
from slurm_ml.policy.quarantine import OWNED_PREFIX, clean_reason

#: The health event the periodic check records for GPU processes of no job; the daemon
#: drains the nodes it names.
ORPHAN_CHECK = "process.orphan"
#: Slurm drain reasons are cut here (the same limit health's reasons keep).
REASON_LIMIT = 99


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One utilisation sample of one GPU a job holds."""

    job_id: int
    node: str
    gpu: int
    at: int  # epoch seconds
    util_pct: float
    mem_mb: int


@dataclass(frozen=True, slots=True)
class ZombieVerdict:
    job_id: int
    action: str  # "warn" | "requeue" | "cancel"
    reason: str  # the sentence the user gets (what, why, what to do)
    details: dict[str, object]


@dataclass(frozen=True, slots=True)
class DrainOrder:
    node: str
    reason: str  # "slurm-ml: ...", safe characters only, at most REASON_LIMIT long
    kind: str  # "stuck_completing" | "orphan_process"
    job_id: int | None
    details: dict[str, object]


@dataclass(frozen=True, slots=True)
class CompletingJob:
    job_id: int
    nodes: tuple[str, ...]
    ended_at: int | None  # when it ended; None = unknown


@dataclass(frozen=True, slots=True)
class OrphanReport:
    """Health found GPU processes on ``node`` that belong to no job."""

    node: str
    at: int
    gpu: int | None
    pids: tuple[int, ...]


def drain_reason(text: str) -> str:
    """An owned drain reason: the prefix, safe characters only, cut to REASON_LIMIT."""
    body = clean_reason(text)
    return f"{OWNED_PREFIX} {body}"[:REASON_LIMIT].rstrip()


# --------------------------------------------------------------------------- zombies


def zombie_exemption(job: RunningJob, cfg: ReclaimConfig) -> str | None:
    """Why a job is never treated as a zombie (None = it may be)."""
    if job.qos in cfg.exempt_qos:
        return f"QOS {job.qos} is exempt"
    if job.account in cfg.exempt_accounts:
        return f"account {job.account} is exempt"
    if not job.batch and cfg.exempt_interactive:
        return "interactive sessions are exempt"
    return None


def gpu_name(node: str, gpu: int) -> str:
    """How every message names one GPU: ``gpu01 GPU 3``."""
    return f"{node} GPU {gpu}"


def _span(seconds: float) -> str:
    """Seconds as an operator reads them: "45 s", "19 min", "7.5 min"."""
    if seconds < 120:
        return f"{round(seconds)} s"
    minutes = seconds / 60
    return f"{round(minutes)} min" if abs(minutes - round(minutes)) < 0.05 else f"{minutes:.1f} min"


@dataclass(frozen=True, slots=True)
class Coverage:
    """How far a job's samples cover the heartbeat window: a verdict needs every GPU of the
    job sampled, the whole window covered, and no gap over twice the sampling interval."""

    window_s: int  # the heartbeat
    max_gap_s: int  # twice the sampling interval
    gpus: int  # the job's GPUs
    sampled: tuple[str, ...]  # its GPUs with a sample of this run ("gpu01 GPU 0")
    covered_s: int  # the least of the window any sampled GPU covers
    largest_gap_s: int  # the longest stretch without a sample, any GPU (0 = none sampled)
    worst_gpu: str | None  # the GPU with the least coverage (ties: the largest gap)
    problems: tuple[str, ...]  # why no verdict can rest on these samples; () = one can

    @property
    def complete(self) -> bool:
        return not self.problems

    def reason(self) -> str:
        """The operator's sentence: no verdict, why, and what to look at."""
        return (f"no zombie verdict: {'; '.join(self.problems)}. A verdict needs samples "
                f"from every GPU of the job covering the {_span(self.window_s)} heartbeat "
                f"with no gap over {_span(self.max_gap_s)}; check that the periodic health "
                f"check (HealthCheckInterval) runs on the job's nodes and records samples.")


def _gpu_coverage(now: int, times: Sequence[int], window_s: int,
                  max_gap_s: int) -> tuple[int, int]:
    """(seconds of the window covered, largest gap) for one GPU's sample times.

    The stretch between two samples is covered when they are at most ``max_gap_s`` apart,
    and so is the stretch from the newest one to ``now``; before the first sample of the
    window, without one at or before its start, nothing is.
    """
    start = now - window_s
    before = [t for t in times if t <= start]
    inside = sorted(t for t in times if start < t <= now)
    seq = ([max(before)] if before else []) + inside
    if not seq:
        return 0, window_s
    covered, largest = 0, 0 if before else seq[0] - start
    for a, b in itertools.pairwise([*seq, now]):
        largest = max(largest, b - a)
        if b - a <= max_gap_s:
            covered += b - max(a, start)
    return covered, largest


def sample_coverage(now: int, job: RunningJob, samples: Sequence[GpuSample],
                    cfg: ReclaimConfig) -> Coverage:
    """Whether ``samples`` (this run's, on the job's nodes) can carry a verdict on ``job``."""
    window_s, max_gap_s = int(cfg.zombie_heartbeat_s), int(2 * cfg.sample_interval_s)
    times: dict[tuple[str, int], list[int]] = {}
    for s in samples:
        if s.job_id == job.job_id and s.at >= job.start and s.at <= now and (
                not job.nodes or s.node in job.nodes):
            times.setdefault((s.node, s.gpu), []).append(s.at)
    sampled = tuple(gpu_name(*k) for k in sorted(times))
    problems = []
    missing = job.gpus - len(times)
    if missing > 0 and job.gpus == 1:
        problems.append("its GPU has no sample of this run")
    elif missing > 0:
        verb = "has" if missing == 1 else "have"
        have = f" (sampled: {', '.join(sampled)})" if sampled else ""
        problems.append(f"{missing} of its {job.gpus} GPUs {verb} no sample of this run{have}")
    per = {k: _gpu_coverage(now, v, window_s, max_gap_s) for k, v in sorted(times.items())}
    worst = min(per, key=lambda k: (per[k][0], -per[k][1]), default=None)
    covered = per[worst][0] if worst is not None else 0
    largest = max((g for _c, g in per.values()), default=0)
    if worst is not None and covered < window_s:
        gap = per[worst][1]
        short = sum(1 for c, _g in per.values() if c < window_s)
        others = f" ({short} of {len(per)} sampled GPUs fall short)" if short > 1 else ""
        problems.append(f"{gpu_name(*worst)}'s samples cover {_span(covered)} of the "
                        f"{_span(window_s)} window, largest gap {_span(gap)}"
                        f"{' > ' if gap > max_gap_s else ' <= '}2 x "
                        f"{cfg.sample_interval_s} s{others}")
    return Coverage(window_s=window_s, max_gap_s=max_gap_s, gpus=job.gpus, sampled=sampled,
                    covered_s=covered, largest_gap_s=largest,
                    worst_gpu=None if worst is None else gpu_name(*worst),
                    problems=tuple(problems))


@dataclass(frozen=True, slots=True)
class IdleSpan:
    """What a job's samples say: idle on every GPU since when, and memory held now."""

    idle_s: int  # how long every GPU has been idle (the shortest over its GPUs)
    last_busy: int | None  # the newest sample above the idle threshold, any GPU
    mem_mb: int  # the most memory any GPU holds in its newest sample
    gpus_sampled: int
    samples: int
    coverage: Coverage


def idle_span(now: int, job: RunningJob, samples: Sequence[GpuSample],
              cfg: ReclaimConfig, *, coverage: Coverage | None = None) -> IdleSpan | None:
    """The job's idle span, or None when the samples cannot tell (see
    :func:`sample_coverage`: a GPU of the job unsampled, the window not covered).
    ``coverage``: that function's answer, when the caller has it already."""
    if coverage is None:
        coverage = sample_coverage(now, job, samples, cfg)
    if not coverage.complete:
        return None
    mine = [s for s in samples if s.job_id == job.job_id and job.start <= s.at <= now
            and (not job.nodes or s.node in job.nodes)]
    by_gpu: dict[tuple[str, int], list[GpuSample]] = {}
    for s in mine:
        by_gpu.setdefault((s.node, s.gpu), []).append(s)
    newest = {k: max(v, key=lambda s: s.at) for k, v in by_gpu.items()}
    last_busy = max((s.at for s in mine if s.util_pct > cfg.zombie_util_pct), default=None)
    spans = []
    for rows in by_gpu.values():
        idle = [s.at for s in rows if last_busy is None or s.at > last_busy]
        spans.append(now - min(idle) if idle else 0)
    return IdleSpan(idle_s=max(0, min(spans)), last_busy=last_busy,
                    mem_mb=max(s.mem_mb for s in newest.values()), gpus_sampled=len(by_gpu),
                    samples=len(mine), coverage=coverage)


def _minutes(seconds: float) -> str:
    return f"{round(seconds / 60)} min"


def _verdict(job: RunningJob, action: str, span: IdleSpan, *, warned: int | None, now: int,
             cfg: ReclaimConfig) -> ZombieVerdict:
    what = (f"job {job.job_id} ({job.name}) holds {job.gpus} GPU(s) with "
            f"{span.mem_mb} MB of GPU memory in use and utilisation at or below "
            f"{cfg.zombie_util_pct:g}% for {_minutes(span.idle_s)} (limit "
            f"{_minutes(cfg.zombie_heartbeat_s)})")
    if action == "warn":
        then = "requeued" if job.requeue and job.batch else "cancelled"
        reason = (f"{what}; unless its GPUs get busy within {_minutes(cfg.zombie_grace_s)} "
                  f"it will be {then}. If it is stuck, cancel it (scancel {job.job_id}) to "
                  f"release the GPUs; if the wait is intended, contact the cluster admins.")
    elif action == "requeue":
        reason = (f"{what}, and stayed idle {_minutes(now - (warned or now))} after a "
                  f"warning, so it was requeued to release the GPUs. It will restart from "
                  f"the queue: resume from your last checkpoint, and contact the cluster "
                  f"admins if the GPUs were in fact in use.")
    else:
        reason = (f"{what}, and stayed idle {_minutes(now - (warned or now))} after a "
                  f"warning, so it was cancelled to release the GPUs. It could not be "
                  f"requeued: submit batch jobs with --requeue and save checkpoints so that "
                  f"they restart instead; contact the cluster admins if this was wrong.")
    details: dict[str, object] = {
        "idle_s": span.idle_s, "mem_mb": span.mem_mb, "util_pct_max": cfg.zombie_util_pct,
        "heartbeat_s": cfg.zombie_heartbeat_s, "grace_s": cfg.zombie_grace_s,
        "gpus_sampled": span.gpus_sampled, "samples": span.samples,
        "sample_interval_s": cfg.sample_interval_s,
        "largest_gap_s": span.coverage.largest_gap_s,
        "last_busy": span.last_busy, "warned_at": warned, "resumable": job.requeue,
        "nodes": list(job.nodes),
    }
    return ZombieVerdict(job_id=job.job_id, action=action, reason=reason, details=details)


@dataclass(frozen=True, slots=True)
class ZombieStatus:
    """Where a running job stands with the zombie rule now (what ``why`` shows)."""

    state: str  # exempt | too_young | no_verdict | busy | idle | memory_free | zombie
    text: str  # one sentence for the operator
    coverage: Coverage | None = None
    span: IdleSpan | None = None


def zombie_status(now: int, job: RunningJob, samples: Sequence[GpuSample],
                  cfg: ReclaimConfig) -> ZombieStatus:
    """The zombie rule's view of ``job`` at ``now``, before any warning: ``zombie`` means
    a warning (or, once warned, the action) is due; every other state says why not."""
    exempt = zombie_exemption(job, cfg)
    if job.gpus <= 0 or exempt is not None:
        return ZombieStatus("exempt", f"never a zombie: {exempt or 'it holds no GPUs'}")
    if now - job.start < cfg.zombie_heartbeat_s:
        return ZombieStatus("too_young", f"no zombie verdict yet: it has run "
                                         f"{_span(job.ran_s(now))}, less than the "
                                         f"{_span(cfg.zombie_heartbeat_s)} heartbeat")
    coverage = sample_coverage(now, job, samples, cfg)
    span = idle_span(now, job, samples, cfg, coverage=coverage)
    if span is None:
        return ZombieStatus("no_verdict", coverage.reason(), coverage)
    if span.idle_s <= 0:
        return ZombieStatus("busy", "not a zombie: its GPUs are busy", coverage, span)
    if span.idle_s < cfg.zombie_heartbeat_s:
        return ZombieStatus("idle", f"not a zombie yet: idle on every GPU for "
                                    f"{_span(span.idle_s)} of the "
                                    f"{_span(cfg.zombie_heartbeat_s)} heartbeat",
                            coverage, span)
    if span.mem_mb < cfg.zombie_min_mem_mb:
        return ZombieStatus("memory_free", f"not a zombie: idle {_span(span.idle_s)} but it "
                                           f"holds {span.mem_mb} MB of GPU memory (below "
                                           f"{cfg.zombie_min_mem_mb} MB)", coverage, span)
    return ZombieStatus("zombie", f"a zombie: idle {_span(span.idle_s)} on every GPU with "
                                  f"{span.mem_mb} MB held", coverage, span)


def zombie_verdicts(now: int, running: Sequence[RunningJob],
                    samples: Mapping[int, Sequence[GpuSample]], warned_at: Mapping[int, int],
                    cfg: ReclaimConfig) -> list[ZombieVerdict]:
    """Warn zombies, then after the grace period requeue (resumable) or cancel them.

    A warning counts only for the current run (one before the job's start is from an
    earlier run of a requeued job). A job with a busy sample after its warning woke up:
    it is not acted on, and if it goes idle for a heartbeat again it is warned again.
    """
    out = []
    for job in sorted(running, key=lambda r: r.job_id):
        status = zombie_status(now, job, samples.get(job.job_id, ()), cfg)
        span = status.span
        if status.state != "zombie" or span is None:
            continue
        warned = warned_at.get(job.job_id)
        if warned is not None and warned < job.start:
            warned = None
        if warned is None or (span.last_busy is not None and span.last_busy > warned):
            out.append(_verdict(job, "warn", span, warned=None, now=now, cfg=cfg))
        elif now - warned >= cfg.zombie_grace_s:
            action = "requeue" if job.requeue and job.batch else "cancel"
            out.append(_verdict(job, action, span, warned=warned, now=now, cfg=cfg))
    return out


# --------------------------------------------------------------------------- drains


def stuck_completing(now: int, jobs: Sequence[CompletingJob], nodes: Mapping[str, Node],
                     cfg: ReclaimConfig) -> list[DrainOrder]:
    """Drain the nodes of jobs COMPLETING longer than the timeout (one order per node, for
    the longest-stuck job); nodes already drained or unknown are left alone."""
    best: dict[str, tuple[int, CompletingJob]] = {}
    for job in jobs:
        if job.ended_at is None:
            continue
        stuck = now - job.ended_at
        if stuck <= cfg.completing_timeout_s:
            continue
        for name in job.nodes:
            node = nodes.get(name)
            if node is None or node.drained:
                continue
            held = best.get(name)
            if held is None or (stuck, -job.job_id) > (held[0], -held[1].job_id):
                best[name] = (stuck, job)
    return [DrainOrder(
        node=name, kind="stuck_completing", job_id=job.job_id,
        reason=drain_reason(f"stuck completing job {job.job_id} ({stuck // 60} min)"),
        details={"ended_at": job.ended_at, "stuck_s": stuck,
                 "timeout_s": cfg.completing_timeout_s})
        for name, (stuck, job) in sorted(best.items())]


def orphan_drains(now: int, reports: Sequence[OrphanReport], nodes: Mapping[str, Node],
                  cfg: ReclaimConfig) -> list[DrainOrder]:
    """Drain each node with a recent orphan-process report (its newest one), unless it is
    already drained or unknown."""
    newest: dict[str, OrphanReport] = {}
    for r in reports:
        if now - r.at > cfg.orphan_lookback_s:
            continue
        node = nodes.get(r.node)
        if node is None or node.drained:
            continue
        held = newest.get(r.node)
        if held is None or r.at > held.at:
            newest[r.node] = r
    out = []
    for name, r in sorted(newest.items()):
        gpu = "" if r.gpu is None else f" gpu{r.gpu}"
        pid = (f" (pid {r.pids[0]}{f' +{len(r.pids) - 1} more' if len(r.pids) > 1 else ''})"
               if r.pids else "")
        out.append(DrainOrder(
            node=name, kind="orphan_process", job_id=None,
            reason=drain_reason(f"process.orphan{gpu}{pid}"),
            details={"at": r.at, "gpu": r.gpu, "pids": list(r.pids)}))
    return out
