"""Gangs first after a wait: a large job is not left behind small work for ever.

Fair share orders the queue by team standing. A gang (a job of many GPUs, typically
several whole nodes) of a team above its share waits behind every job of the teams
below theirs; under a steady stream of small jobs the nodes it needs never come free
together, and Slurm's backfill reserves nodes only for the jobs at the top of the
queue. Once a gang has waited ``gang_first_after_min`` it is raised above every team's
band, oldest first and ``gang_first_count`` at a time, so that Slurm reserves nodes for
it and backfills only work that ends before they are due. The fast lane's short work
stays ahead of it: the gang gets the lane's band without the short-work boost.

Only allocated (QOS alloc) work: free work is preemptible and owed to no one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_ml.config import FairshareConfig
from slurm_ml.model import ALLOC_QOS
from slurm_ml.policy.fairshare.lane import lane_site_factor
from slurm_ml.policy.fairshare.standing import job_site_factor


@dataclass(frozen=True, slots=True)
class GangJob:
    """A pending QOS alloc job that asks for GPUs, as this rule reads it."""

    job_id: int
    gpus: int
    submit: int  # epoch seconds
    nice: int = 0
    qos: str = ALLOC_QOS


def rule_on(cfg: FairshareConfig) -> bool:
    """Whether the rule raises any gang at all (``gang_first_after_min`` and ``_count``)."""
    return cfg.gang_first_after_min > 0 and cfg.gang_first_count > 0


def is_gang(gpus: int, cfg: FairshareConfig, qos: str = ALLOC_QOS) -> bool:
    """Whether a job of ``gpus`` GPUs in ``qos`` is a gang this rule may raise (never
    when off, never free work)."""
    return rule_on(cfg) and qos == ALLOC_QOS and gpus >= cfg.gang_min_gpus


def gangs_first(gangs: Iterable[GangJob], now: int, cfg: FairshareConfig,
                associations: int) -> dict[int, int]:
    """SiteFactor of each gang raised this cycle, to lay over the bands' values.

    The gangs that have waited at least ``gang_first_after_min`` since submission, oldest
    first (then by job id), the first ``gang_first_count`` of them; each gets the fast
    lane's band (:func:`lane_site_factor`, above every team's) moved by its nice, and no
    short-work boost, so lane work still goes before it."""
    if not rule_on(cfg):
        return {}
    due = now - cfg.gang_first_after_min * 60
    waited = sorted((g for g in gangs if is_gang(g.gpus, cfg, g.qos) and g.submit <= due),
                    key=lambda g: (g.submit, g.job_id))
    value = lane_site_factor(cfg, associations)
    return {g.job_id: job_site_factor(value, g.nice, cfg)
            for g in waited[:cfg.gang_first_count]}
