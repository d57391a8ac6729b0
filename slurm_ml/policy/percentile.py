"""One percentile for everything that needs one: admission's GPU-memory profiles (the
store, matching PostgreSQL's ``percentile_cont``) and the simulator's wait statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile_cont(values: Sequence[float], q: float) -> float:
    """PostgreSQL's ``percentile_cont(q) WITHIN GROUP (ORDER BY v)``: linear interpolation.

    Sorts ``values`` and interpolates between the two closest ranks at position
    ``q * (n - 1)``, with the same floating-point steps as PostgreSQL (so results
    agree to the last bit). ValueError for no values or ``q`` outside [0, 1].
    """
    if not values:
        raise ValueError("percentile_cont needs at least one value")
    if isinstance(q, bool) or not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    ordered = sorted(float(v) for v in values)
    position = q * (len(ordered) - 1)
    first = math.floor(position)
    second = math.ceil(position)
    lo = ordered[first]
    if second == first:
        return lo
    hi = ordered[second]
    return lo + (position - first) * (hi - lo)
