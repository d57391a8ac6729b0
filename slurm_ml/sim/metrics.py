"""What a simulated run means in numbers: fairness, waits, occupancy, targets (pure).

``summarize`` reduces one ``SimResult`` to a ``Summary`` an admin can compare across
policies; ``targets`` checks the issue's outcome targets on it; ``compare`` prints several
summaries side by side. Nothing here re-runs or changes a simulation.

Definitions (window ``[a, b]``, default the run's ``[start_s, end_s]``):

- *Jobs in scope* are those submitted in ``[a, b]``.
- *Sampled time*: each ``CycleSample`` holds from its ``t_s`` until the next sample (the
  last one until ``b``), clipped to ``[a, b]``. Time-weighted means are over that; time
  before the first sample is unknown and does not count.
- *Wait* of a job is ``start_s - submit_s``. A job that never started is counted as
  waiting until the run's end, ``SimResult.end_s - submit_s`` (a lower bound), and is
  **included** in every wait statistic, per class and overall; ``never_started`` says
  how many.
- Percentiles interpolate linearly between closest ranks (numpy's default).
- *Occupancy* = busy GPU-seconds / (cluster GPUs x sampled time). *Utilisation* is the
  same number: the trace has no per-GPU utilisation, so a busy GPU counts as fully used.
- *Fragmentation* = time-weighted mean of ``fragmented_gpus / free_gpus`` over the time
  when ``free_gpus > 0`` (None if the cluster was never free).
- *Slowdown* of a finished job = ``(end_s - submit_s) / run_s``; without requeues that is
  ``(wait + run) / run``, with them it also counts the waits after each requeue.
- *Owed, delivered* per team come from the last sample in the window that has the team
  in its maps (window values); ``ratio`` = delivered / owed there, ``ratio_mean`` its
  time-weighted mean over the sampled time after the warm-up (default the window's first
  10%) where owed > 0.
- *Share* of a team = its weight / sum of weights x cluster GPUs (none without a weight).
  The team has *enough demand* when busy + pending GPUs >= its share for more than half
  of the sampled time (``demand_frac`` > 0.5).
- *Requeues* and lost GPU-hours are summed over jobs in scope; *preemptions* is the run's
  total, the contracts' requeues plus Slurm's own QOS preemptions of free work (the
  result does not say when they happened).
- *Large-job p90 wait* (``large_job_p90_wait``, the large-job target's measure): the p90
  wait of jobs of at least 16 GPUs submitted in the window given (the judged one),
  censored waits included.
- *Preemption loss fraction* (``preemption_loss_fraction``): GPU-seconds lost to
  requeues (not node faults) over all GPU-seconds the jobs' runs held, over the run.
- *Targets*, six: the minimum team ratio over teams with enough demand >= 95%, the
  median over every team owed something >= 98% (Ai2's ratios below where the workload
  was given, else ``ratio_mean``), the debug p90 wait <= 60 s, occupancy >= 95% (after
  the warm-up, when there are samples then: the simulated cluster starts empty; where
  fifo's run of the same workload is under 95% itself, no more than half a point below
  fifo's), the large-job p90 wait no worse than fifo's (the ratio <= 1; it cannot be
  judged without a fifo run beside it), and the preemption loss fraction <= 2%. Bounds
  are inclusive; a target with nothing to measure fails and says "cannot judge".

Ai2's measures (``ai2_measures``; these are the headline, the running ratio above stays
as a chart series, labelled "running ratio"):

- The *judged window* is ``[a + warm-up, b]``; ``b`` is the last arrival, so the drain
  after it counts for neither occupancy nor fairness.
- *Entitled* GPU-hours of a team in an hour = its share (weight share x cluster GPUs) x
  the part of that hour inside the judged window.
- *Demand* GPU-hours in an hour = GPUs its allocated (QOS alloc) jobs were asking for
  (a job asks from its submission to its end: it is running or pending all that time)
  integrated over that hour, exactly from the job records; *busy* GPU-hours likewise
  from each allocated job's runs. Unallocated (QOS free) work is owed to no one, as in
  Ai2's design and in the policy's own fair share: it counts for occupancy, never for
  owed or delivered.
- *Owed* = sum over hours of ``min(entitled_h, demand_h)``; *delivered* = busy GPU-hours
  in the judged window; *delivered toward owed* = sum over hours of
  ``min(busy_h, owed_h)``; *ratio* = delivered toward owed / owed, Ai2's "fraction of
  owed GPU-hours delivered" (at most 100%: capacity borrowed in one hour does not make
  up for a shortfall in another). *Surplus ratio* = delivered / owed (above 100% when a
  team used idle capacity beyond what it was owed).
- *Offered load* = GPU-hours requested inside the judged window (each job's requested
  run time clipped to the window, as if it ran from its submission) / (cluster GPUs x
  window hours). It depends on the trace and scenario only, never on the policy.
- A team has *enough demand* when its offered allocated GPU-hours in the judged window
  reach its entitled GPU-hours there: decided from the offered load, the same for every
  policy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_ml.policy.percentile import percentile_cont
from slurm_ml.sim.result import CycleSample, JobOutcome, SimResult
from slurm_ml.sim.workload import DEBUG, LARGE, SMALL, SimJob

#: Wait statistics are keyed by job class, then ``ALL`` for every job.
ALL = "all"
CLASSES = (DEBUG, SMALL, LARGE)
#: Default warm-up, as a fraction of the window: ratios are noisy until owed builds up.
WARMUP_FRACTION = 0.1
#: Float slack for target boundaries, so 0.95 computed as a sum still passes ">= 0.95".
_EPS = 1e-9


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None when empty."""
    return percentile_cont(values, p / 100.0) if values else None


def _median(values: Sequence[float]) -> float | None:
    return percentile(values, 50.0)


@dataclass(frozen=True, slots=True)
class WaitStats:
    """Queue waits of one job class, never-started jobs included at their censored wait."""

    jobs: int
    never_started: int
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    mean_s: float | None
    max_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "never_started": self.never_started, "p50_s": self.p50_s,
                "p90_s": self.p90_s, "p99_s": self.p99_s, "mean_s": self.mean_s,
                "max_s": self.max_s}


@dataclass(frozen=True, slots=True)
class TeamSummary:
    """One team: what it was owed and got, how much it asked for, how long it waited."""

    team: str
    share_gpus: float | None  # weight share of the cluster, in GPUs
    owed_gpu_h: float | None  # last sample in the window
    delivered_gpu_h: float | None
    ratio: float | None  # delivered / owed at the last sample
    ratio_mean: float | None  # time-weighted, after the warm-up, where owed > 0
    demand_frac: float | None  # fraction of sampled time with busy + pending >= share
    enough_demand: bool
    jobs: int
    finished: int
    gpu_h_run: float  # all attempts, including work later lost to requeues
    slowdown_p50: float | None
    slowdown_p90: float | None

    @property
    def judged_ratio(self) -> float | None:
        """The ratio the targets use: the mean after warm-up, else the last one."""
        return self.ratio_mean if self.ratio_mean is not None else self.ratio

    def as_dict(self) -> dict[str, Any]:
        return {"team": self.team, "share_gpus": self.share_gpus,
                "owed_gpu_h": self.owed_gpu_h, "delivered_gpu_h": self.delivered_gpu_h,
                "ratio": self.ratio, "ratio_mean": self.ratio_mean,
                "demand_frac": self.demand_frac, "enough_demand": self.enough_demand,
                "jobs": self.jobs, "finished": self.finished, "gpu_h_run": self.gpu_h_run,
                "slowdown_p50": self.slowdown_p50, "slowdown_p90": self.slowdown_p90}


#: What the Ai2 numbers mean, recorded in every report so a reader need not guess.
DEFINITIONS: dict[str, str] = {
    "judged_window": "[first arrival + warm-up, last arrival]: warm-up and drain excluded",
    "entitled_gpu_h": "per hour: weight share x cluster GPUs x hours inside the window",
    "demand_gpu_h": "per hour: GPU-hours the team's allocated (QOS alloc) jobs asked "
                    "for (running + pending); unallocated work is owed to no one",
    "owed_gpu_h": "sum over hours of min(entitled, demand)",
    "delivered_gpu_h": "busy GPU-hours of the team's allocated jobs inside the judged "
                       "window",
    "delivered_owed_gpu_h": "per hour: min(busy, owed) GPU-hours, summed over the window",
    "ratio": "delivered toward owed / owed, at most 100% (Ai2's headline fairness "
             "number: the fraction of owed GPU-hours delivered)",
    "surplus_ratio": "all delivered / owed: above 100% when the team used idle capacity",
    "ratio_mean": "running ratio: time-averaged delivered/owed of the policy's own "
                  "ledger after warm-up; a chart series, not the headline",
    "offered_load": "GPU-hours requested inside the judged window (each job clipped to "
                    "it, as if run from submission) / (cluster GPUs x window hours)",
    "enough_demand": "offered allocated GPU-hours in the judged window >= entitled "
                     "GPU-hours there: from the workload, the same for every policy",
    "type_occupancy": "per GPU type: busy GPU-time of that type's GPUs / (its GPUs x "
                      "sampled time) over the judged window (a pool's utilisation)",
}


@dataclass(frozen=True, slots=True)
class Ai2Team:
    """One team over the judged window, by Ai2's definitions (see DEFINITIONS)."""

    team: str
    entitled_gpu_h: float
    demand_gpu_h: float
    owed_gpu_h: float
    delivered_gpu_h: float
    offered_gpu_h: float | None
    enough_demand: bool
    #: delivered counted toward owed: sum over hours of min(busy, owed) in that hour
    delivered_owed_gpu_h: float = 0.0

    @property
    def ratio(self) -> float | None:
        """Ai2's "fraction of owed GPU-hours delivered" (<= 1: GPUs beyond what was owed
        in an hour, borrowed from idle teams, do not make up for another hour's shortfall)."""
        return self.delivered_owed_gpu_h / self.owed_gpu_h if self.owed_gpu_h > 0 else None

    @property
    def surplus_ratio(self) -> float | None:
        """All busy GPU-hours over owed (> 1 when the team borrowed idle capacity)."""
        return self.delivered_gpu_h / self.owed_gpu_h if self.owed_gpu_h > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {"team": self.team, "entitled_gpu_h": self.entitled_gpu_h,
                "demand_gpu_h": self.demand_gpu_h, "owed_gpu_h": self.owed_gpu_h,
                "delivered_gpu_h": self.delivered_gpu_h,
                "delivered_owed_gpu_h": self.delivered_owed_gpu_h, "ratio": self.ratio,
                "surplus_ratio": self.surplus_ratio,
                "offered_gpu_h": self.offered_gpu_h, "enough_demand": self.enough_demand}


def offered_gpu_h(jobs: Iterable[SimJob], window: tuple[float, float], *,
                  allocated_only: bool = False) -> dict[str, float]:
    """GPU-hours each team's jobs request inside ``window``, each job's requested run
    time clipped to it as if it ran from its submission (policy-independent);
    ``allocated_only``: its QOS alloc jobs only (what it can be owed)."""
    a, b = window
    out: dict[str, float] = {}
    for job in jobs:
        if allocated_only and not job.allocated:
            continue
        d = min(b, job.submit_s + job.duration_s) - max(a, job.submit_s)
        if d > 0:
            out[job.team] = out.get(job.team, 0.0) + job.gpus * d / 3600.0
    return out


def offered_load(jobs: Iterable[SimJob], cluster_gpus: int,
                 window: tuple[float, float]) -> float:
    """Offered GPU-hours inside ``window`` over its capacity (1.0 = exactly full)."""
    a, b = window
    if cluster_gpus < 1 or b <= a:
        raise ValueError(f"offered load needs GPUs >= 1 and a window, got {cluster_gpus}, "
                         f"[{a}, {b}]")
    return sum(offered_gpu_h(jobs, window).values()) * 3600.0 / (cluster_gpus * (b - a))


def judged_window(jobs: Sequence[SimJob], warmup_fraction: float = WARMUP_FRACTION
                  ) -> tuple[float, float]:
    """``[first arrival + warm-up, last arrival]`` of a workload sorted by submission."""
    if not jobs:
        raise ValueError("no jobs: no judged window")
    a, b = jobs[0].submit_s, max(jobs[-1].submit_s, jobs[0].submit_s + 1.0)
    return (a + warmup_fraction * (b - a), b)


def shares(result: SimResult) -> dict[str, float]:
    """Each weighted team's share of the cluster, in GPUs."""
    total = sum(w for w in result.team_weights.values() if w > 0)
    return {t: w / total * result.cluster_gpus
            for t, w in result.team_weights.items() if w > 0}


def _hours(lo: float, hi: float, a: float, b: float, hour_s: float
           ) -> Iterator[tuple[int, float]]:
    """(hour index from ``a``, hours of ``[lo, hi]`` inside it), clipped to ``[a, b]``."""
    lo, hi = max(lo, a), min(hi, b)
    if lo >= hi:
        return
    hour = int((lo - a) // hour_s)
    while lo < hi:
        top = min(hi, a + (hour + 1) * hour_s)
        if top > lo:  # float rounding can put lo a hair past the hour's top
            yield hour, (top - lo) / 3600.0
            lo = top
        hour += 1


@dataclass(frozen=True, slots=True)
class _Ai2Hours:
    """Ai2's hour-by-hour quantities over a window, the one computation behind both the
    judged totals (``ai2_measures``) and the report's series (``ai2_series``)."""

    entitled: Mapping[str, float]
    owed_h: Mapping[str, Mapping[int, float]]  # team -> hour -> min(entitled, demand)
    busy_h: Mapping[tuple[str, int], float]
    demand: Mapping[str, float]
    delivered: Mapping[str, float]

    def toward(self, team: str, hour: int) -> float:
        """GPU-hours delivered toward what was owed in that hour (capped at it)."""
        return min(self.busy_h.get((team, hour), 0.0), self.owed_h[team][hour])


def _ai2_hours(result: SimResult, window: tuple[float, float], hour_s: float) -> _Ai2Hours:
    a, b = window
    share = shares(result)
    entitled: dict[str, float] = {}
    entitled_h: dict[tuple[str, int], float] = {}
    demand: dict[tuple[str, int], float] = {}
    busy_h: dict[tuple[str, int], float] = {}
    delivered: dict[str, float] = {}
    for team, g in share.items():
        for hour, part in _hours(a, b, a, b, hour_s):
            entitled_h[team, hour] = g * part
            entitled[team] = entitled.get(team, 0.0) + g * part
    for job in result.jobs:
        if not job.feasible or not job.allocated:
            continue  # never ran, or unallocated work: owed to no one
        # from submission to its end a job is always running or pending: asking for GPUs
        until = job.end_s if job.end_s is not None else result.end_s
        for hour, part in _hours(job.submit_s, until, a, b, hour_s):
            demand[job.team, hour] = demand.get((job.team, hour), 0.0) + job.gpus * part
        for start, end, held in job.runs:
            for hour, part in _hours(start, end, a, b, hour_s):
                busy_h[job.team, hour] = busy_h.get((job.team, hour), 0.0) + held * part
                delivered[job.team] = delivered.get(job.team, 0.0) + held * part
    names = set(share) | {t for t, _ in demand}
    owed_h: dict[str, dict[int, float]] = {}
    asked: dict[str, float] = {}
    for team in sorted(names):
        hours = {h for (t, h) in demand if t == team} | {h for (t, h) in entitled_h if t == team}
        owed_h[team] = {h: min(entitled_h.get((team, h), 0.0), demand.get((team, h), 0.0))
                        for h in hours}
        asked[team] = sum(v for (t, _), v in demand.items() if t == team)
    return _Ai2Hours(entitled=entitled, owed_h=owed_h, busy_h=busy_h, demand=asked,
                     delivered=delivered)


def ai2_measures(result: SimResult, window: tuple[float, float], *,
                 offered: Mapping[str, float] | None = None, hour_s: float = 3600.0
                 ) -> dict[str, Ai2Team]:
    """Ai2's delivered/owed per team over ``window`` (the judged one), hour by hour,
    exactly from the job records (each job's submission, runs and end), not the samples.

    ``offered`` (team -> offered allocated GPU-hours in ``window``) decides *enough
    demand*; without it no team has enough demand, rather than judging by the policy's
    outcome. Unallocated jobs are neither demand nor delivered.
    """
    got = _ai2_hours(result, window, hour_s)
    out: dict[str, Ai2Team] = {}
    for team, owed_h in got.owed_h.items():
        mine = None if offered is None else offered.get(team, 0.0)
        ent = got.entitled.get(team, 0.0)
        out[team] = Ai2Team(
            team=team, entitled_gpu_h=ent, demand_gpu_h=got.demand[team],
            owed_gpu_h=sum(owed_h.values()), delivered_gpu_h=got.delivered.get(team, 0.0),
            offered_gpu_h=mine,
            delivered_owed_gpu_h=sum(got.toward(team, h) for h in owed_h),
            enough_demand=mine is not None and ent > 0 and mine >= ent - _EPS)
    return out


def ai2_series(result: SimResult, window: tuple[float, float], *, hour_s: float = 3600.0
               ) -> dict[str, list[tuple[float, float, float]]]:
    """Per team, at the end of each hour of ``window``: (time, owed so far, delivered
    toward owed so far) in GPU-hours. The last point's ratio is the judged one, so a chart
    of it ends where the target table does."""
    got = _ai2_hours(result, window, hour_s)
    a, b = window
    out: dict[str, list[tuple[float, float, float]]] = {}
    for team, owed_h in got.owed_h.items():
        owed = toward = 0.0
        points = []
        for hour in sorted(owed_h):
            owed += owed_h[hour]
            toward += got.toward(team, hour)
            points.append((min(b, a + (hour + 1) * hour_s), owed, toward))
        out[team] = points
    return out


@dataclass(frozen=True, slots=True)
class Summary:
    """The headline numbers of one run over one window."""

    policy: str
    cluster_gpus: int
    window: tuple[float, float]
    warmup_s: float
    sampled_s: float
    jobs: int
    teams: tuple[TeamSummary, ...]
    waits: Mapping[str, WaitStats]  # job class (and ALL) -> waits
    occupancy: float | None
    utilisation: float | None  # == occupancy: the trace has no per-GPU utilisation
    preemptions: int  # whole run: the result does not say when they happened
    requeues: int
    lost_gpu_h: float
    fragmentation: float | None
    max_wait_s: float | None  # starvation: longest wait of any job, censored ones included
    max_wait_never_started_s: float | None
    wall_s: float
    # occupancy after the warm-up: a simulated cluster starts empty, a real one never does
    steady_occupancy: float | None = None
    qos_preemptions: int = 0  # of ``preemptions``, Slurm's own (QOS alloc over free)
    ai2: Mapping[str, Ai2Team] = field(default_factory=dict)  # team -> Ai2's measures
    judged_window: tuple[float, float] | None = None
    offered_load: float | None = None  # from the workload, the same for every policy
    #: GPU type -> occupancy of that type's GPUs over the judged window (after warm-up)
    type_occupancy: Mapping[str, float] = field(default_factory=dict)
    #: whole run: node faults, the runs they ended and the work those lost (GPU-hours)
    node_faults: int = 0
    fault_requeues: int = 0
    fault_lost_gpu_h: float = 0.0
    #: judged window: p90 wait of jobs of >= ``LARGE_JOB_GPUS`` GPUs, and how many there were
    large_p90_s: float | None = None
    large_jobs: int = 0
    #: whole run: ``preemption_loss_fraction``
    loss_frac: float | None = None
    #: after the warm-up: GPU-hours free while some job waited (what fragmentation and
    #: reservations cost), and their share of the capacity then
    idle_waiting_gpu_h: float | None = None
    idle_waiting_frac: float | None = None

    def team(self, name: str) -> TeamSummary:
        for t in self.teams:
            if t.team == name:
                return t
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (lists, str keys, None for undefined; no NaN or infinity)."""
        return {
            "policy": self.policy, "cluster_gpus": self.cluster_gpus,
            "window": list(self.window), "warmup_s": self.warmup_s,
            "sampled_s": self.sampled_s, "jobs": self.jobs,
            "teams": [t.as_dict() for t in self.teams],
            "waits": {k: w.as_dict() for k, w in self.waits.items()},
            "occupancy": self.occupancy, "utilisation": self.utilisation,
            "utilisation_note": "no per-GPU utilisation in the trace: equals occupancy",
            "preemptions": self.preemptions, "requeues": self.requeues,
            "lost_gpu_h": self.lost_gpu_h, "fragmentation": self.fragmentation,
            "max_wait_s": self.max_wait_s,
            "max_wait_never_started_s": self.max_wait_never_started_s,
            "wall_s": self.wall_s, "steady_occupancy": self.steady_occupancy,
            "qos_preemptions": self.qos_preemptions,
            "judged_window": None if self.judged_window is None else list(self.judged_window),
            "offered_load": self.offered_load,
            "type_occupancy": dict(self.type_occupancy),
            "node_faults": self.node_faults, "fault_requeues": self.fault_requeues,
            "fault_lost_gpu_h": self.fault_lost_gpu_h,
            "large_p90_s": self.large_p90_s, "large_jobs": self.large_jobs,
            "loss_frac": self.loss_frac,
            "idle_waiting_gpu_h": self.idle_waiting_gpu_h,
            "idle_waiting_frac": self.idle_waiting_frac,
            "ai2": {k: v.as_dict() for k, v in sorted(self.ai2.items())},
            "definitions": DEFINITIONS,
        }


@dataclass(frozen=True, slots=True)
class TargetCheck:
    """One outcome target: the value measured, the bound, and why it holds or not."""

    name: str
    value: float | None
    op: str  # ">=" or "<="
    threshold: float
    passed: bool
    explanation: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "op": self.op,
                "threshold": self.threshold, "passed": self.passed,
                "explanation": self.explanation}


def intervals(samples: Iterable[CycleSample], a: float, b: float
              ) -> list[tuple[CycleSample, float]]:
    """Each sample with the time it holds inside ``[a, b]`` (until the next sample, the
    last one until ``b``); samples holding no time there are left out."""
    ordered = sorted(samples, key=lambda s: s.t_s)
    out: list[tuple[CycleSample, float]] = []
    for i, s in enumerate(ordered):
        hi = ordered[i + 1].t_s if i + 1 < len(ordered) else b
        d = min(hi, b) - max(s.t_s, a)
        if d > 0:
            out.append((s, d))
    return out


def _wait_or_censored(job: JobOutcome, run_end: float) -> float:
    w = job.wait_s
    return max(0.0, run_end - job.submit_s) if w is None else w


def _wait_stats(jobs: Sequence[JobOutcome], run_end: float) -> WaitStats:
    waits = [_wait_or_censored(j, run_end) for j in jobs]
    return WaitStats(
        jobs=len(jobs), never_started=sum(1 for j in jobs if j.start_s is None),
        p50_s=percentile(waits, 50), p90_s=percentile(waits, 90),
        p99_s=percentile(waits, 99), mean_s=sum(waits) / len(waits) if waits else None,
        max_s=max(waits) if waits else None)


#: A large job, for the large-job wait target (p90 no worse than fifo's): at least this
#: many GPUs.
LARGE_JOB_GPUS = 16


def large_job_p90_wait(result: SimResult, window: tuple[float, float], *,
                       min_gpus: int = LARGE_JOB_GPUS) -> float | None:
    """p90 queue wait (s) of the jobs of at least ``min_gpus`` GPUs submitted in
    ``window`` (bounds included; the large-job target judges it over the judged window).

    By GPU count, not job class: ``LARGE`` is a gang of more than one node, so it
    depends on the node size. A job that never started counts as waiting until the
    run's end (``result.end_s - submit_s``, a lower bound), as in every wait statistic
    here. None when no such job was submitted in ``window``.
    """
    a, b = window
    waits = [_wait_or_censored(j, result.end_s) for j in result.jobs
             if j.gpus >= min_gpus and a <= j.submit_s <= b]
    return percentile(waits, 90)


def delivered_gpu_s(result: SimResult) -> float:
    """GPU-seconds every job's runs held over the whole run (each run's GPUs x its
    length, work later lost to a requeue included; a run still going ends at the run's
    end)."""
    return sum(held * (end - start) for j in result.jobs for start, end, held in j.runs)


def preemption_loss_fraction(result: SimResult) -> float | None:
    """GPU-seconds lost to preemption over GPU-seconds delivered, over the whole run.

    Lost is the sum of every job's ``lost_gpu_s``: work since the last checkpoint thrown
    away by a requeue, the contracts' and Slurm's QOS preemption of free work alike.
    Node faults are not preemptions and are not in it (``SimResult.fault_lost_gpu_s``
    counts them apart). Delivered is :func:`delivered_gpu_s`, so the lost work is part
    of it. None when nothing ran.
    """
    delivered = delivered_gpu_s(result)
    if delivered <= 0:
        return None
    return sum(j.lost_gpu_s for j in result.jobs) / delivered


def _team_summary(team: str, result: SimResult, *, jobs: Sequence[JobOutcome],
                  spans: Sequence[tuple[CycleSample, float]],
                  warm: Sequence[tuple[CycleSample, float]]) -> TeamSummary:
    total_w = sum(w for w in result.team_weights.values() if w > 0)
    weight = result.team_weights.get(team, 0.0)
    # A team without a weight has no share, so it cannot have "enough demand" for one.
    share = weight / total_w * result.cluster_gpus if weight > 0 else None

    last = next((s for s, _ in reversed(spans) if team in s.owed_gpu_h), None)
    owed = last.owed_gpu_h[team] if last is not None else None
    delivered = last.delivered_gpu_h.get(team) if last is not None else None
    ratio = delivered / owed if owed and delivered is not None else None

    num = den = 0.0
    for s, d in warm:
        o = s.owed_gpu_h.get(team, 0.0)
        if o > 0:
            num += s.delivered_gpu_h.get(team, 0.0) / o * d
            den += d
    ratio_mean = num / den if den > 0 else None

    sampled = sum(d for _, d in spans)
    demand_frac: float | None = None
    if share is not None and sampled > 0:
        asking = sum(d for s, d in spans
                     if s.busy_gpus.get(team, 0) + s.pending_gpus.get(team, 0) >= share)
        demand_frac = asking / sampled

    mine = [j for j in jobs if j.team == team]
    done = [j for j in mine if j.start_s is not None and j.end_s is not None]
    slow = [(j.end_s - j.submit_s) / j.run_s for j in done
            if j.end_s is not None and j.run_s > 0]
    return TeamSummary(
        team=team, share_gpus=share, owed_gpu_h=owed, delivered_gpu_h=delivered,
        ratio=ratio, ratio_mean=ratio_mean, demand_frac=demand_frac,
        enough_demand=demand_frac is not None and demand_frac > 0.5,
        jobs=len(mine), finished=len(done),
        gpu_h_run=sum(j.gpus * j.run_s for j in mine) / 3600.0,
        slowdown_p50=percentile(slow, 50), slowdown_p90=percentile(slow, 90))


def _idle_while_waiting(spans: Sequence[tuple[CycleSample, float]], gpus: int
                        ) -> dict[str, float | None]:
    """GPU-hours free while at least one job waited, and that over the capacity then."""
    if not spans or gpus < 1:
        return {"idle_waiting_gpu_h": None, "idle_waiting_frac": None}
    idle = sum(s.free_gpus * d for s, d in spans if any(s.pending_gpus.values()))
    return {"idle_waiting_gpu_h": idle / 3600.0,
            "idle_waiting_frac": idle / (gpus * sum(d for _, d in spans))}


def _occupancy(spans: Sequence[tuple[CycleSample, float]], gpus: int) -> float | None:
    """Busy GPU time over ``gpus`` x the time ``spans`` cover (None: nothing sampled)."""
    sampled = sum(d for _, d in spans)
    if sampled <= 0 or gpus <= 0:
        return None
    return sum(sum(s.busy_gpus.values()) * d for s, d in spans) / (gpus * sampled)


def type_occupancy(spans: Sequence[tuple[CycleSample, float]]) -> dict[str, float]:
    """Per GPU type, its busy GPU time over its GPUs x the sampled time (the pools of a
    heterogeneous cluster; samples without per-type counts give nothing)."""
    busy: dict[str, float] = {}
    size: dict[str, float] = {}
    for s, d in spans:
        for name, n in s.busy_by_type.items():
            busy[name] = busy.get(name, 0.0) + n * d
            size[name] = size.get(name, 0.0) + (n + s.free_by_type.get(name, 0)) * d
    return {name: busy[name] / size[name] for name in busy if size[name] > 0}


def summarize(result: SimResult, *, window: tuple[float, float] | None = None,
              warmup_s: float | None = None,
              workload: Sequence[SimJob] | None = None) -> Summary:
    """Reduce a run to its headline numbers (definitions in the module docstring).

    ``warmup_s`` is measured from the window's start; default ``WARMUP_FRACTION`` of it.
    ``workload`` (the jobs simulated) gives the offered load, which decides *enough
    demand* for Ai2's measures the same way for every policy.
    """
    a, b = window if window is not None else (result.start_s, result.end_s)
    if b < a:
        raise ValueError(f"window ends before it starts: {a} > {b}")
    warm = WARMUP_FRACTION * (b - a) if warmup_s is None else warmup_s
    jobs = [j for j in result.jobs if a <= j.submit_s <= b]
    spans = intervals(result.samples, a, b)
    sampled = sum(d for _, d in spans)

    kinds = list(CLASSES) + sorted({j.kind for j in jobs} - set(CLASSES))
    waits = {k: _wait_stats([j for j in jobs if j.kind == k], result.end_s) for k in kinds}
    waits[ALL] = _wait_stats(jobs, result.end_s)
    never = [_wait_or_censored(j, result.end_s) for j in jobs if j.start_s is None]

    occupancy = _occupancy(spans, result.cluster_gpus)
    free_time = sum(d for s, d in spans if s.free_gpus > 0)
    fragmentation = (sum(s.fragmented_gpus / s.free_gpus * d for s, d in spans
                         if s.free_gpus > 0) / free_time) if free_time > 0 else None

    names = set(result.team_weights) | {j.team for j in result.jobs}
    for s, _ in spans:
        names |= set(s.busy_gpus) | set(s.pending_gpus) | set(s.owed_gpu_h)
    warm_spans = intervals(result.samples, min(a + warm, b), b)
    steady = _occupancy(warm_spans, result.cluster_gpus)
    teams = tuple(_team_summary(t, result, jobs=jobs, spans=spans, warm=warm_spans)
                  for t in sorted(names))

    judged = (min(a + warm, b), b)
    offered = offered_gpu_h(workload, judged) if workload is not None else None
    load = (sum(offered.values()) * 3600.0 / (result.cluster_gpus * (judged[1] - judged[0]))
            if offered is not None and judged[1] > judged[0] and result.cluster_gpus > 0
            else None)
    owed_to = (offered_gpu_h(workload, judged, allocated_only=True)
               if workload is not None else None)
    ai2 = ai2_measures(result, judged, offered=owed_to)
    return Summary(
        policy=result.policy, cluster_gpus=result.cluster_gpus, window=(a, b),
        warmup_s=warm, sampled_s=sampled, jobs=len(jobs), teams=teams, waits=waits,
        occupancy=occupancy, utilisation=occupancy, preemptions=result.preemptions,
        requeues=sum(j.requeues for j in jobs),
        lost_gpu_h=sum(j.lost_gpu_s for j in jobs) / 3600.0, fragmentation=fragmentation,
        max_wait_s=waits[ALL].max_s, max_wait_never_started_s=max(never) if never else None,
        wall_s=result.wall_s, steady_occupancy=steady,
        qos_preemptions=result.qos_preemptions, ai2=ai2, judged_window=judged,
        offered_load=load, type_occupancy=type_occupancy(warm_spans),
        node_faults=result.node_faults, fault_requeues=result.fault_requeues,
        fault_lost_gpu_h=result.fault_lost_gpu_s / 3600.0,
        large_p90_s=large_job_p90_wait(result, judged),
        large_jobs=sum(1 for j in result.jobs
                       if j.gpus >= LARGE_JOB_GPUS and judged[0] <= j.submit_s <= judged[1]),
        loss_frac=preemption_loss_fraction(result),
        **_idle_while_waiting(warm_spans, result.cluster_gpus))


_UNITS = {"min ratio (enough demand)": "pct", "median team ratio": "pct",
          "debug p90 wait": "s", "occupancy": "pct", "large-job p90 wait vs fifo": "x",
          "preemption loss": "pct"}
#: Each target's rule as a reader sees it, whatever one run's threshold came to.
TARGET_RULES = {"min ratio (enough demand)": ">= 95.0%", "median team ratio": ">= 98.0%",
                "debug p90 wait": "<= 60 s",
                "occupancy": ">= 95.0% (or at most 0.5 points below fifo's under 95%)",
                "large-job p90 wait vs fifo": "<= 1.00", "preemption loss": "<= 2.0%"}
#: The policy every other is measured against where a target is relative.
BASELINE_POLICY = "fifo"
#: Where the baseline itself misses the occupancy target, a policy may be this far below it.
OCCUPANCY_SLACK = 0.005


def human_duration(seconds: float | None) -> str:
    """A duration in the unit a reader thinks in: seconds, minutes, hours, then days."""
    if seconds is None:
        return "-"
    if not math.isfinite(seconds):
        return "never"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        minutes = seconds / 60
        return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _fmt(value: float | None, unit: str) -> str:
    """``pct``: a fraction as percent; ``s``: a duration (``human_duration``); ``n``: a
    count; ``x``: 2 places."""
    if value is None:
        return "-"
    if unit == "pct":
        return f"{value * 100:.1f}%"
    if unit == "s":
        return human_duration(value)
    if unit == "n":
        return f"{value:.0f}"
    return f"{value:.2f}"


def _check(name: str, value: float | None, op: str, threshold: float, what: str, *,
           bound: str = "") -> TargetCheck:
    """``bound``: how the threshold reads when it is not a plain number (a baseline's)."""
    if value is None:
        return TargetCheck(name, None, op, threshold, False, f"cannot judge: {what}")
    ok = value >= threshold - _EPS if op == ">=" else value <= threshold + _EPS
    unit = _UNITS[name]
    return TargetCheck(name, value, op, threshold, ok,
                       f"{what}: {_fmt(value, unit)} ({'meets' if ok else 'misses'} "
                       f"{op} {bound or _fmt(threshold, unit)})")


def shown_value(check: TargetCheck) -> str:
    """A target's measured value in its unit (percent, a duration, a ratio)."""
    return _fmt(check.value, _UNITS[check.name])


def relative_wait(mine: float | None, base: float | None) -> float | None:
    """``mine`` over ``base``, where no wait at all is as good as any other no wait: 1.0
    when both are 0, infinity when only the baseline's is 0, None when either is unknown."""
    if mine is None or base is None:
        return None
    if base > 0:
        return mine / base
    return 1.0 if mine == 0 else math.inf


def baseline_of(summaries: Iterable[Summary]) -> Summary | None:
    """The summary the relative targets are judged against: ``fifo``'s, when it ran."""
    return next((s for s in summaries if s.policy == BASELINE_POLICY), None)


def _teams(n: int) -> str:
    return f"{n} team" if n == 1 else f"{n} teams"


def targets(summary: Summary, baseline: Summary | None = None) -> list[TargetCheck]:
    """The six outcome targets. A target with nothing to measure fails ("cannot judge").

    Team ratios are Ai2's where the workload was given, else ``judged_ratio`` (mean after
    warm-up). The first target covers teams with enough demand; the median is over every
    team that was owed something. ``baseline`` (``baseline_of``: fifo's run of the same
    workload) judges the two relative targets: large-job waits no worse than its, and
    occupancy no more than half a point below its where it is under 95% itself; without
    it (or for fifo itself) the large-job target cannot be judged (fifo passes it by
    definition) and occupancy is held to 95%.
    """
    if summary.offered_load is not None:  # Ai2's measures: the workload was given
        ai2 = [t for t in summary.ai2.values() if t.ratio is not None]
        need2 = [t for t in ai2 if t.enough_demand]
        low = min(need2, key=lambda t: t.ratio or 0.0) if need2 else None
        ratios = [r for t in ai2 if (r := t.ratio) is not None]
        worst_team, worst_ratio, n_needy = (low.team if low else None,
                                            low.ratio if low else None, len(need2))
    else:
        needy = [t for t in summary.teams if t.enough_demand and t.judged_ratio is not None]
        worst = min(needy, key=lambda t: t.judged_ratio or 0.0) if needy else None
        ratios = [r for t in summary.teams if (r := t.judged_ratio) is not None]
        worst_team, worst_ratio, n_needy = (worst.team if worst else None,
                                            worst.judged_ratio if worst else None, len(needy))
    if baseline is not None and baseline.policy == summary.policy:
        baseline = None  # the baseline is not judged against itself
    debug = summary.waits.get(DEBUG)
    occupancy = judged_occupancy(summary)
    return [
        _check("min ratio (enough demand)", worst_ratio, ">=", 0.95,
               f"worst of {_teams(n_needy)} with enough demand is {worst_team!r}"
               if worst_team is not None else "no team had enough demand"),
        _check("median team ratio", _median(ratios), ">=", 0.98,
               f"median delivered/owed over {_teams(len(ratios))} owed something" if ratios
               else "no team was owed anything"),
        _check("debug p90 wait", debug.p90_s if debug and debug.jobs else None, "<=", 60.0,
               f"p90 queue wait of {debug.jobs} debug jobs ({debug.never_started} never "
               "started)" if debug and debug.jobs else "no debug jobs"),
        _occupancy_check(summary, occupancy, baseline),
        *_relative_checks(summary, baseline),
    ]


def judged_occupancy(summary: Summary) -> float | None:
    """The occupancy the target judges: after the warm-up where there are samples then
    (a simulated cluster starts empty, a real one never does), else the whole window's."""
    steady = summary.steady_occupancy
    return steady if steady is not None else summary.occupancy


def occupancy_bound(baseline: float | None) -> float:
    """The occupancy a policy must reach: 95%, or, where the baseline (fifo's judged
    occupancy of the same workload) is under 95% itself, the baseline's less
    ``OCCUPANCY_SLACK``: a workload that cannot fill the cluster under fifo cannot under
    any policy, and the target then asks only that the policy costs no more than that."""
    if baseline is not None and baseline < 0.95:
        return baseline - OCCUPANCY_SLACK
    return 0.95


def _occupancy_check(summary: Summary, occupancy: float | None,
                     baseline: Summary | None) -> TargetCheck:
    """:func:`occupancy_bound` of the baseline, with the reason."""
    what = (f"busy GPU time over {summary.cluster_gpus} GPUs after the "
            f"{human_duration(summary.warmup_s)} warm-up (the simulated cluster starts "
            "empty)" if summary.steady_occupancy is not None else
            f"busy GPU time over {summary.cluster_gpus} GPUs x "
            f"{human_duration(summary.sampled_s)} sampled" if occupancy is not None
            else "no samples")
    base = judged_occupancy(baseline) if baseline is not None else None
    bound = occupancy_bound(base)
    if base is not None and bound < 0.95:
        return _check("occupancy", occupancy, ">=", bound, what,
                      bound=f"{_fmt(bound, 'pct')}: {BASELINE_POLICY}'s "
                            f"{_fmt(base, 'pct')}, under 95% itself, less half a point")
    return _check("occupancy", occupancy, ">=", 0.95, what)


@dataclass(frozen=True, slots=True)
class FlaggedTeam:
    """A team the fairness targets leave out (not enough demand) that still got less than
    95% of what it was owed: a reader should know it was not judged, and why."""

    team: str
    ratio: float
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"team": self.team, "ratio": self.ratio, "why": self.why}


def judged_teams(summary: Summary) -> set[str]:
    """The teams the fairness targets judge: enough demand, by Ai2's offered-load rule
    where the workload was given, else by the sampled demand."""
    if summary.offered_load is not None:
        return {t.team for t in summary.ai2.values() if t.enough_demand}
    return {t.team for t in summary.teams if t.enough_demand}


def flagged_teams(summary: Summary) -> list[FlaggedTeam]:
    """Teams outside the judged set below 95% of owed, worst first."""
    out: list[FlaggedTeam] = []
    if summary.offered_load is not None:
        for t in summary.ai2.values():
            if t.enough_demand or t.ratio is None or t.ratio >= 0.95 - _EPS:
                continue
            offered = t.offered_gpu_h or 0.0
            out.append(FlaggedTeam(t.team, t.ratio, (
                f"not judged: its jobs asked for {offered:,.0f} GPU-hours in the judged "
                f"window, under the {t.entitled_gpu_h:,.0f} its share entitles it to")))
    else:
        for ts in summary.teams:
            r = ts.judged_ratio
            if ts.enough_demand or r is None or r >= 0.95 - _EPS:
                continue
            busy = "-" if ts.demand_frac is None else f"{ts.demand_frac * 100:.0f}%"
            out.append(FlaggedTeam(ts.team, r, (
                f"not judged: busy and pending GPUs reached its share for {busy} of the "
                "time, not more than half")))
    return sorted(out, key=lambda f: (f.ratio, f.team))


def _relative_checks(summary: Summary, baseline: Summary | None) -> list[TargetCheck]:
    """The large-job and loss targets (after the four absolute ones)."""
    name = "large-job p90 wait vs fifo"
    if summary.policy == BASELINE_POLICY:
        large = TargetCheck(name, 1.0, "<=", 1.0, True,
                            f"{BASELINE_POLICY} is the baseline the others are measured against")
    elif baseline is None:
        large = _check(name, None, "<=", 1.0, f"{BASELINE_POLICY} was not run beside it")
    elif summary.large_p90_s is None:
        large = _check(name, None, "<=", 1.0,
                       f"no job of >= {LARGE_JOB_GPUS} GPUs was submitted in the judged window")
    else:
        large = _check(
            name, relative_wait(summary.large_p90_s, baseline.large_p90_s), "<=", 1.0,
            f"p90 wait of {summary.large_jobs} jobs of >= {LARGE_JOB_GPUS} GPUs: "
            f"{human_duration(summary.large_p90_s)} against {BASELINE_POLICY}'s "
            f"{human_duration(baseline.large_p90_s)}")
    loss = _check("preemption loss", summary.loss_frac, "<=", 0.02,
                  "GPU time lost to requeues over GPU time delivered, whole run"
                  if summary.loss_frac is not None else "nothing ran")
    return [large, loss]


def comparison_rows(summaries: Sequence[Summary]) -> list[tuple[str, list[str]]]:
    """Headline rows, one cell per summary: shared by ``compare`` and the HTML report."""
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, values: Sequence[float | None], unit: str) -> None:
        rows.append((label, [_fmt(v, unit) for v in values]))

    base = baseline_of(summaries)
    checks = [targets(s, base) for s in summaries]
    for i, c in enumerate(checks[0] if checks else []):
        unit = _UNITS[c.name]
        rows.append((f"target: {c.name} {TARGET_RULES[c.name]}",
                     [f"{_fmt(cs[i].value, unit)} {'PASS' if cs[i].passed else 'FAIL'}"
                      for cs in checks]))
    row("teams with enough demand",
        [sum(t.enough_demand for t in (s.ai2.values() if s.offered_load is not None
                                       else s.teams)) for s in summaries], "n")
    row("offered load (judged window)", [s.offered_load for s in summaries], "x")
    # one occupancy, the judged one: the whole window's (warm-up included) stays in JSON
    row("occupancy after warm-up (judged)", [judged_occupancy(s) for s in summaries], "pct")
    pools = list(dict.fromkeys(t for s in summaries for t in s.type_occupancy))
    if len(pools) > 1:
        for pool in pools:
            row(f"  {pool} occupancy after warm-up",
                [s.type_occupancy.get(pool) for s in summaries], "pct")
    row("GPUs idle while jobs waited (share of capacity)",
        [s.idle_waiting_frac for s in summaries], "pct")
    row("  as GPU-hours", [s.idle_waiting_gpu_h for s in summaries], "x")
    row("fragmentation index", [s.fragmentation for s in summaries], "pct")
    row("teams not judged and below 95% (flagged)",
        [len(flagged_teams(s)) for s in summaries], "n")
    row("preemptions", [s.preemptions for s in summaries], "n")
    row("  of which Slurm's (alloc over free)", [s.qos_preemptions for s in summaries], "n")
    row("requeues", [s.requeues for s in summaries], "n")
    row("GPU-hours lost to requeues", [s.lost_gpu_h for s in summaries], "x")
    kinds = list(dict.fromkeys(k for s in summaries for k in s.waits))
    for k in kinds:
        ws = [s.waits.get(k) for s in summaries]
        row(f"{k} jobs", [w.jobs if w else None for w in ws], "n")
        row(f"{k} never started", [w.never_started if w else None for w in ws], "n")
        for stat in ("p50", "p90", "p99", "mean"):
            row(f"{k} wait {stat}", [getattr(w, f"{stat}_s") if w else None for w in ws], "s")
    row("max wait (starvation)", [s.max_wait_s for s in summaries], "s")
    row("max wait, never started", [s.max_wait_never_started_s for s in summaries], "s")
    teams = list(dict.fromkeys(t.team for s in summaries for t in s.teams))
    for name in teams:
        got = [next((t for t in s.teams if t.team == name), None) for s in summaries]
        if any(s.offered_load is not None for s in summaries):
            # Ai2's ratio only: the policy's running ratio (in JSON) reads as a second,
            # different answer to the same question
            row(f"{name} delivered/owed (Ai2)",
                [s.ai2[name].ratio if name in s.ai2 else None for s in summaries], "pct")
        else:
            row(f"{name} delivered/owed", [t.judged_ratio if t else None for t in got], "pct")
        row(f"{name} slowdown p50", [t.slowdown_p50 if t else None for t in got], "x")
    row("simulation wall time (s)", [s.wall_s for s in summaries], "x")
    return rows


def compare(summaries: Sequence[Summary]) -> str:
    """A side-by-side text table, policies as columns, for the CLI."""
    header = ["metric", *(s.policy for s in summaries)]
    body = [[label, *cells] for label, cells in comparison_rows(summaries)]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in body]
    return "\n".join(out)
