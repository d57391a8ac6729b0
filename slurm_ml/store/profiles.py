"""Pure helpers for the store's aggregate reads, so FakeStore computes what PostgreSQL does."""

from __future__ import annotations

from slurm_ml.policy.percentile import percentile_cont

__all__ = ["check_runs", "percentile_cont"]


def check_runs(runs: int) -> None:
    """Validate ``gpu_mem_profiles``' ``runs``: an int of at least 1."""
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be an int >= 1, got {runs!r}")
