"""Pending reasons the daemon's own SiteFactor pushes blank out, kept across cycles.

Slurm resets a pending job's Reason to ``None`` when its SiteFactor is updated, and
states it again only when its scheduler next reaches the job (Slurm 22.05 on the dev
cluster, 2026-12-06: ``Resources`` -> ``None`` at once after ``scontrol update
SiteFactor=``, ``Resources`` again 1.5 s later; deep in a long queue that can take until
backfill gets there; Slurm 24.11.5 in the trixie container does the same, and an
integration test pins it on both). The contracts need Slurm to have said the job waits for GPUs or
priority (``policy.pending.STARVING_WAITS``), so a cycle soon after one that re-ranked a
starved job would not see it starved: the daemon's own push, not Slurm, hid it.

So the daemon keeps, for each pending job whose SiteFactor it pushed, the starving
reason Slurm showed before the push, and reads that reason while Slurm still shows
``None`` for the job; any other reason Slurm gives afterwards replaces it. Pure: the
daemon holds the map from cycle to cycle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from slurm_ml.model import Job, JobState
from slurm_ml.policy.pending import Wait, starving, wait_of

__all__ = ["kept_after", "restored"]


def _blank(reason: str) -> bool:
    return wait_of(reason) == Wait.UNEVALUATED


def restored(jobs: Sequence[Job], kept: Mapping[int, str],
             ) -> tuple[tuple[Job, ...], frozenset[int]]:
    """``jobs`` with each pending job Slurm shows unevaluated given its ``kept`` reason,
    and the ids of the jobs so restored."""
    if not kept:
        return tuple(jobs), frozenset()
    out: list[Job] = []
    ids: set[int] = set()
    for j in jobs:
        reason = kept.get(j.job_id)
        if reason is not None and j.state == JobState.PENDING and _blank(j.reason):
            out.append(dataclasses.replace(j, reason=reason))
            ids.add(j.job_id)
        else:
            out.append(j)
    return tuple(out), frozenset(ids)


def kept_after(jobs: Sequence[Job], pushed: Collection[int],
               restored_ids: Collection[int]) -> dict[int, str]:
    """The map for the next cycle: from ``jobs`` as this cycle read them (restored), the
    starving reason of each pending job whose SiteFactor was ``pushed`` this cycle or
    whose reason was restored (Slurm has said nothing new of it since)."""
    return {j.job_id: j.reason for j in jobs
            if j.state == JobState.PENDING and starving(j.reason)
            and (j.job_id in pushed or j.job_id in restored_ids)}
