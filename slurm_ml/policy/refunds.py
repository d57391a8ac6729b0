"""Fault refunds: a run that ended because slurm-ml drained its node is not charged (pure).

A team should not pay for bad hardware. A run is refunded when one of slurm-ml's own
drains (the audit log's ``drain`` entries: a prolog, epilog or periodic finding) explains
how it ended:

* **job**: the drain names the run's job (``job_id``: a prolog that failed the job, an
  epilog that found a fault on its GPUs, the daemon's requeue for a repair at the contract
  of a node with a finding, hook ``repair``), and falls inside the run (from ``slack_s``
  before its start to ``slack_s`` after its end: the epilog runs after the end; of a
  requeued job's runs, the one it is nearest to);
* **node**: the drain is of a node the run used, within ``slack_s`` of the run's end (a
  periodic check finds the fault a little before or after the job dies of it).

Either way only a run that ended badly is refunded: COMPLETED, TIMEOUT, OUT_OF_MEMORY and
DEADLINE runs ended of themselves, and a run still going has not ended at all. Each run is
refunded at most once, for the drain that explains it best (its job's first, then the
nearest in time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from slurm_ml.model import JobState, JobUsage

__all__ = ["REFUNDABLE", "FaultDrain", "Refund", "refunds"]

#: End states a fault explains. CANCELLED too: the health hooks end a job on a failed
#: GPU by cancelling it, and a user who cancels a job whose node just failed does so for it.
REFUNDABLE = frozenset({JobState.FAILED, JobState.NODE_FAIL, JobState.REQUEUED,
                        JobState.CANCELLED, JobState.PREEMPTED, JobState.BOOT_FAIL})


@dataclass(frozen=True, slots=True)
class FaultDrain:
    """One slurm-ml drain as the audit log recorded it (``at``: epoch seconds)."""

    key: str  # the audit entry's idempotency key: which drain, for the refund's record
    node: str
    at: int
    hook: str  # prolog | epilog | periodic
    job_id: int | None
    checks: tuple[str, ...] = ()  # the checks it drained for
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Refund:
    """One run left uncharged, and the drain that justified it."""

    job_id: int
    account: str
    user: str
    start: int
    end: int
    state: JobState
    gpus: float
    gpu_hours: float  # inside the window
    billing_gpu_hours: float  # what the window would have charged
    route: str  # "job" | "node"
    drain: FaultDrain

    @property
    def why(self) -> str:
        checks = ", ".join(self.drain.checks) or self.drain.reason or "a health finding"
        when = "before" if self.drain.at <= self.end else "after"
        how = (f"slurm-ml requeued it to repair {self.drain.node}"
               if self.drain.hook == "repair" else
               f"the {self.drain.hook} drain of {self.drain.node} names the job"
               if self.route == "job" else
               f"the {self.drain.hook} check drained {self.drain.node}, which it ran on, "
               f"{abs(self.end - self.drain.at)} s {when} it ended")
        return (f"job {self.job_id} ended {self.state.value}: {how} ({checks}); its "
                f"{self.gpu_hours:.2f} GPU-hours ({self.billing_gpu_hours:.2f} "
                f"billing-weighted) are not charged to {self.account}")


def refunds(usage: Iterable[JobUsage], drains: Sequence[FaultDrain],
            nodes_of: Callable[[JobUsage], Sequence[str]],
            billing_gpus: Callable[[JobUsage], float], slack_s: float) -> list[Refund]:
    """The runs in ``usage`` that a drain in ``drains`` explains the end of.

    ``nodes_of``: the nodes a run used (its sacct NodeList); ``billing_gpus``: its GPUs at
    their billing weight, as the window charges them.
    """
    runs = [u for u in usage if u.start is not None]
    by_job: dict[tuple[int, int | None], list[FaultDrain]] = {}
    by_node: dict[str, list[FaultDrain]] = {}
    for d in drains:
        if d.job_id is not None:
            # a requeued job has a run per start: the drain names the one it is nearest
            mine = [u for u in runs if u.job_id == d.job_id]
            if mine:
                best = min(mine, key=lambda u: _distance(d.at, u))
                by_job.setdefault((d.job_id, best.start), []).append(d)
        by_node.setdefault(d.node, []).append(d)
    out = []
    for u in runs:
        if u.state not in REFUNDABLE or u.start is None or u.end is None or u.gpus <= 0:
            continue
        start, end = u.start, u.end
        hit = _nearest([d for d in by_job.get((u.job_id, start), ())
                        if start - slack_s <= d.at <= end + slack_s], end)
        route = "job"
        if hit is None:
            route = "node"
            near = [d for n in dict.fromkeys(nodes_of(u)) for d in by_node.get(n, ())
                    if abs(d.at - end) <= slack_s and d.at >= start - slack_s]
            hit = _nearest(near, end)
        if hit is None:
            continue
        hours = u.elapsed_s / 3600.0
        out.append(Refund(job_id=u.job_id, account=u.account, user=u.user, start=start,
                          end=end, state=u.state, gpus=u.gpus, gpu_hours=u.gpus * hours,
                          billing_gpu_hours=billing_gpus(u) * hours, route=route, drain=hit))
    return out


def _distance(at: int, u: JobUsage) -> int:
    """Seconds from ``at`` to the run's span (0 inside it; a run going on spans to ``at``)."""
    start = u.start if u.start is not None else at
    end = u.end if u.end is not None else max(at, start)
    return max(0, start - at, at - end)


def _nearest(drains: Sequence[FaultDrain], end: int) -> FaultDrain | None:
    return min(drains, key=lambda d: (abs(d.at - end), d.key), default=None)
