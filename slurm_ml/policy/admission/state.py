"""What admission knows beyond the request: budget standing and GPU memory profiles.

submitd refreshes this from PostgreSQL in the background and swaps in a new value;
decisions read one immutable snapshot, so the request path never waits on the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from slurm_ml.config import Config
from slurm_ml.policy.fairshare import capacity_billing_gpus


@dataclass(frozen=True, slots=True)
class AccountStanding:
    """A budget account's place in the current fair-share window."""

    account: str
    exhausted: bool  # used at least its budget share of the window's GPU-hours
    site_factor: int | None = None  # the reconciler's last SiteFactor for this account
    usage_gpu_hours: float = 0.0
    budget_gpu_hours: float = 0.0
    lane_gpus: int | None = None  # fast-lane GPUs it held at the last cycle (None: unknown)
    lane_at: datetime | None = None  # when that cycle counted them (its snapshot's time)


@dataclass(frozen=True, slots=True)
class LaneAdmission:
    """A short job admission put in the fast lane, which no cycle has counted yet."""

    at: datetime
    account: str
    gpus: int


@dataclass(frozen=True, slots=True)
class AdmissionState:
    standing: Mapping[str, AccountStanding] = field(default_factory=dict)
    #: (user, job name) → p95 peak GPU memory over recent runs, in GB
    profiles_gb: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: user → the default account slurmdbd holds for them (what a job without -A runs under)
    default_accounts: Mapping[str, str] = field(default_factory=dict)
    loaded_at: datetime | None = None  # None = never loaded (no database yet)
    #: lane admissions since the snapshots above (``lane_held`` adds them to theirs)
    lane_admitted: tuple[LaneAdmission, ...] = ()


def _uncounted(state: AdmissionState, entry: LaneAdmission) -> bool:
    """Whether no cycle on record has counted ``entry``: it came after the snapshot of
    its account (a job admitted before a cycle is in what that cycle read from Slurm)."""
    s = state.standing.get(entry.account)
    return s is not None and s.lane_gpus is not None and (s.lane_at is None
                                                          or entry.at > s.lane_at)


def lane_held(state: AdmissionState) -> dict[str, int]:
    """Fast-lane GPUs per account: what the last cycle counted, plus what admission has
    put in the lane since. Without the second part a burst of short jobs submitted
    between two cycles would all go in the lane, past both of its caps."""
    held = {a: s.lane_gpus for a, s in state.standing.items() if s.lane_gpus is not None}
    for e in state.lane_admitted:
        if _uncounted(state, e):
            held[e.account] += e.gpus
    return held


def with_lane_admission(state: AdmissionState, entry: LaneAdmission) -> AdmissionState:
    """``state`` after admission put one more job in the lane."""
    return replace(state, lane_admitted=(*state.lane_admitted, entry))


def carry_lane_admissions(old: AdmissionState, new: AdmissionState) -> AdmissionState:
    """``new`` (freshly loaded) with the lane admissions of ``old`` its snapshots have not
    counted yet; the others are in its snapshots now, and are dropped."""
    return replace(new, lane_admitted=tuple(e for e in old.lane_admitted
                                            if _uncounted(new, e)))


def window_capacity_gpu_hours(cfg: Config) -> float:
    """Billing GPU-hours the whole cluster offers in one fair-share window (the unit the
    reconciler's snapshots count usage in: GPUs x their type's billing weight)."""
    return capacity_billing_gpus(cfg) * cfg.policy.fairshare.window_hours


def account_standing(account: str, budget_share: float, usage_gpu_hours: float,
                     site_factor: int | None, capacity_gpu_hours: float,
                     *, lane_gpus: int | None = None,
                     lane_at: datetime | None = None) -> AccountStanding:
    """Exhausted when the window's usage reached the account's share of capacity."""
    budget = budget_share * capacity_gpu_hours
    return AccountStanding(account=account, exhausted=usage_gpu_hours >= budget,
                           site_factor=site_factor, usage_gpu_hours=usage_gpu_hours,
                           budget_gpu_hours=budget, lane_gpus=lane_gpus, lane_at=lane_at)
