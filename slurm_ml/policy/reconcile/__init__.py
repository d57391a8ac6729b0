"""The reconcile cycle: one function that the daemon and the simulator both call."""

from slurm_ml.policy.reconcile.cycle import (
    CycleDecision,
    CycleInput,
    Room,
    WaitingQueue,
    fast_lane,
    narrow_victims,
    reconcile,
    starved_and_victims,
    starved_of,
    starving_accounts,
)

__all__ = [
    "CycleDecision",
    "CycleInput",
    "Room",
    "WaitingQueue",
    "fast_lane",
    "narrow_victims",
    "reconcile",
    "starved_and_victims",
    "starved_of",
    "starving_accounts",
]
