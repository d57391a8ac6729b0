"""What admission knows beyond the request: budget standing and GPU memory profiles.

submitd refreshes this from PostgreSQL in the background and swaps in a new value;
decisions read one immutable snapshot, so the request path never waits on the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class AdmissionState:
    standing: Mapping[str, AccountStanding] = field(default_factory=dict)
    #: (user, job name) → p95 peak GPU memory over recent runs, in GB
    profiles_gb: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: user → the default account slurmdbd holds for them (what a job without -A runs under)
    default_accounts: Mapping[str, str] = field(default_factory=dict)
    loaded_at: datetime | None = None  # None = never loaded (no database yet)


def window_capacity_gpu_hours(cfg: Config) -> float:
    """Billing GPU-hours the whole cluster offers in one fair-share window (the unit the
    reconciler's snapshots count usage in: GPUs x their type's billing weight)."""
    return capacity_billing_gpus(cfg) * cfg.policy.fairshare.window_hours


def account_standing(account: str, budget_share: float, usage_gpu_hours: float,
                     site_factor: int | None, capacity_gpu_hours: float,
                     *, lane_gpus: int | None = None) -> AccountStanding:
    """Exhausted when the window's usage reached the account's share of capacity."""
    budget = budget_share * capacity_gpu_hours
    return AccountStanding(account=account, exhausted=usage_gpu_hours >= budget,
                           site_factor=site_factor, usage_gpu_hours=usage_gpu_hours,
                           budget_gpu_hours=budget, lane_gpus=lane_gpus)
