"""Budgeted, billing-weighted hierarchical fair share (the Ai2 design), as pure policy.

Managers set GPU-time budgets on the tree org -> program -> project -> user. Over a
sliding window (7 days) each node is *owed* its budget share of the cluster hour by
hour, capped at what it actually asked for, with unused entitlement flowing to its
siblings; *delivered* is the allocated (QOS ``alloc``) billing GPU-hours it ran. Free
work (QOS ``free``) is never charged and never counts as demand: it is only reported.

Scheduling order is Slurm's Fair Tree fed with this windowed usage instead of Slurm's
decayed RawUsage (which cannot be a window, nor be set): siblings rank by S/U, depth
first. The rank becomes a per-job SiteFactor band wide enough to dominate the other
priority factors, so a user's ``--nice`` only reorders jobs inside its own team's band.

No I/O and no clock: the caller passes ``now`` (epoch seconds) and the footprints.

Callers import from here. The parts:

* :mod:`.standing`: ``fair_share`` (each node's standing and the ranking) and the
  SiteFactor bands (``site_factors``, ``job_site_factor``);
* :mod:`.tree`: the budget tree flattened, and Slurm's Fair Tree ranking over it;
* :mod:`.owed`: owed GPU-hours, demand water-filled down the tree;
* :mod:`.ledger`: footprints kept as running sums, so a window is tallied in constant
  time per association (the simulator's every-few-minutes cycles).
"""

from slurm_ml.policy.fairshare.ledger import FootprintLedger
from slurm_ml.policy.fairshare.standing import (
    SITE_FACTOR_LIMIT,
    FairShare,
    Footprint,
    PendingJob,
    Standing,
    band,
    capacity_billing_gpus,
    fair_share,
    is_short_job,
    job_site_factor,
    site_factors,
)

__all__ = [
    "SITE_FACTOR_LIMIT",
    "FairShare",
    "Footprint",
    "FootprintLedger",
    "PendingJob",
    "Standing",
    "band",
    "capacity_billing_gpus",
    "fair_share",
    "is_short_job",
    "job_site_factor",
    "site_factors",
]
