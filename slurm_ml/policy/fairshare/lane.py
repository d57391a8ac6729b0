"""The fast lane for short work: debug jobs ahead of every team's band, within a cap.

Ai2 cut the p90 queue wait of debug jobs from 2 h to 30 s. In slurm-ml a debug job of a
team ranked low waited behind every higher-ranked team's backlog, because SiteFactor
bands order alloc work by team first (the short-job boost only moves it up inside its
own band). The lane gives short work (a contract and a time limit within
``policy.fairshare.short_job_*``) the SiteFactor one step above the highest band any
ranking can hand out, so it starts at the next free GPU, and Slurm's preempt/qos frees
GPUs of free-QOS work for it at once. What keeps the lane from becoming a way around
the budgets: it is charged like any alloc work, a job over ``max_job_gpus`` is never in
it, and its GPUs, running and queued lane jobs together, stay within a cluster-wide
cap (``gpus_fraction``) and a cap per account (``team_gpus``). A short job beyond them
waits in its team's band, with the short-job boost.

Admission puts a short job in the lane at submission when the last cycle left its
account room (so that it need not wait a cycle); each cycle then recomputes the lane
from what slurmctld reports (:func:`lane_members`), oldest submission first.

Pure: the jobs and the GPUs held come in as values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurm_ml.config import FairshareConfig, FastLaneConfig
from slurm_ml.policy.fairshare.standing import SITE_FACTOR_LIMIT, is_short_work, job_site_factor

__all__ = ["Lane", "LaneJob", "fits", "is_short_work", "lane_cap", "lane_members",
           "lane_site_factor", "lane_site_factors"]


@dataclass(frozen=True, slots=True)
class LaneJob:
    """A short alloc job the lane may take (pending) or counts (running)."""

    job_id: int
    account: str
    gpus: int
    submit: int  # epoch seconds: the lane is first come, first served
    nice: int = 0


@dataclass(frozen=True, slots=True)
class Lane:
    """This cycle's lane: its members, their SiteFactor, and what each account holds."""

    members: frozenset[int]  # pending job ids in the lane
    site_factor: int  # the lane's band (before a job's nice)
    held: Mapping[str, int]  # account -> lane GPUs, running and admitted pending
    cap: int  # GPUs the lane may hold at once, cluster-wide


def lane_cap(total_gpus: int, cfg: FastLaneConfig) -> int:
    """GPUs the lane may hold at once: a floor, so a small cluster may have none."""
    return max(0, math.floor(cfg.gpus_fraction * total_gpus + 1e-9))


def lane_site_factor(cfg: FairshareConfig, associations: int) -> int:
    """One step above the top band of any ranking of the tree's ``associations``
    (:func:`slurm_ml.config.rules.associations`): admission and the daemon agree on it
    without knowing how many associations are ranked now. The config's band rule
    (boost + nice range + other weights < step) keeps a lane job, nice or not, above
    every job of the top band."""
    return min(cfg.top_band(max(1, associations)) + cfg.site_factor_step, SITE_FACTOR_LIMIT)


def fits(account: str, gpus: int, held: Mapping[str, int], total: int, cap: int,
         *, cfg: FastLaneConfig) -> bool:
    """Whether a short job of ``gpus`` fits the lane's room as ``held`` leaves it."""
    return (0 < gpus <= cfg.max_job_gpus and total + gpus <= cap
            and held.get(account, 0) + gpus <= cfg.team_gpus)


def lane_members(pending: Sequence[LaneJob], running: Iterable[LaneJob], total_gpus: int,
                 *, cfg: FastLaneConfig, fcfg: FairshareConfig, associations: int) -> Lane:
    """The pending short jobs in the lane this cycle: oldest submission first, each
    while the lane (the GPUs of running short jobs, then those taken before it) keeps
    room under both caps; a job that does not fit is skipped, and a smaller one after
    it may still fit."""
    held: dict[str, int] = {}
    for r in running:
        held[r.account] = held.get(r.account, 0) + r.gpus
    cap = lane_cap(total_gpus, cfg)
    total = sum(held.values())
    members: set[int] = set()
    for job in sorted(pending, key=lambda j: (j.submit, j.job_id)):
        if not fits(job.account, job.gpus, held, total, cap, cfg=cfg):
            continue
        members.add(job.job_id)
        held[job.account] = held.get(job.account, 0) + job.gpus
        total += job.gpus
    return Lane(members=frozenset(members), site_factor=lane_site_factor(fcfg, associations),
                held=held, cap=cap)


def lane_site_factors(lane: Lane, pending: Iterable[LaneJob],
                      fcfg: FairshareConfig) -> dict[int, int]:
    """SiteFactor of each lane member: the lane's band, moved by its nice and boosted
    as short work (:func:`job_site_factor`), to lay over :func:`site_factors`' values."""
    return {j.job_id: job_site_factor(lane.site_factor, j.nice, fcfg, True)
            for j in pending if j.job_id in lane.members}
