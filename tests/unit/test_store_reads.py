"""The admission policy's reads: percentile_cont, and what only FakeStore's knobs show.

The reads themselves (latest budget snapshots, GPU memory profiles) are in the contract
suite, tests/store_contract.py, run over FakeStore and PostgresStore.
"""

from __future__ import annotations

import pytest
from builders import budget_snapshot, job_gpu_stats, store_with

from slurm_ml.store import GpuMemProfile, StoreUnavailable
from slurm_ml.store.profiles import percentile_cont

# --- percentile_cont ---


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([42.0], 0.95, 42.0),  # one value: that value, whatever q
        ([42.0], 0.0, 42.0),
        ([10.0, 20.0], 0.5, 15.0),
        ([10.0, 20.0], 0.95, 19.5),  # 10 + 0.95 * (20 - 10)
        ([10.0, 20.0], 0.0, 10.0),
        ([10.0, 20.0], 1.0, 20.0),
        ([float(v) for v in range(1, 21)], 0.95, 19.05),  # position 18.05: 19 + 0.05 * 1
        ([float(v) for v in range(20, 0, -1)], 0.95, 19.05),  # input order does not matter
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0.5, 3.0),  # exact rank, no interpolation
        ([100.0, 300.0, 200.0, 400.0], 0.95, 385.0),  # position 2.85: 300 + 0.85 * 100
        ([5.0, 5.0, 5.0], 0.95, 5.0),
    ],
)
def test_percentile_cont(values: list[float], q: float, expected: float) -> None:
    assert percentile_cont(values, q) == pytest.approx(expected)


def test_percentile_cont_uses_postgres_arithmetic() -> None:
    # PostgreSQL: lo + (position - floor(position)) * (hi - lo), position = q * (n - 1)
    values = [float(v) for v in range(1, 21)]
    position = 0.95 * 19
    assert percentile_cont(values, 0.95) == 19.0 + (position - 18) * (20.0 - 19.0)


@pytest.mark.parametrize("q", [-0.1, 1.5, float("nan")])
def test_percentile_cont_rejects_q_outside_0_1(q: float) -> None:
    with pytest.raises(ValueError, match="q must be in"):
        percentile_cont([1.0], q)


def test_percentile_cont_rejects_no_values() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        percentile_cont([], 0.5)


# --- gpu_mem_profiles and latest_budget_snapshots ---


def test_profiles_and_latest_snapshots_need_the_store() -> None:
    fake = store_with([job_gpu_stats(), budget_snapshot()])
    fake.set_available(False)
    with pytest.raises(StoreUnavailable):
        fake.gpu_mem_profiles()
    with pytest.raises(StoreUnavailable):
        fake.latest_budget_snapshots()


def test_gpu_mem_profile_is_frozen() -> None:
    profile = GpuMemProfile("alice", "train", 1.0, 1)
    with pytest.raises(AttributeError):
        profile.runs = 2  # type: ignore[misc]
