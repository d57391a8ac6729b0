"""The admission policy's reads: latest budget snapshots and GPU memory profiles (FakeStore)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slurm_ml.store import (
    BudgetSnapshot,
    FakeStore,
    GpuMemProfile,
    JobGpuStats,
    SpoolingStore,
    StoreUnavailable,
)
from slurm_ml.store.profiles import percentile_cont

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def gpu(
    job_id: int,
    peak_mem_mb: int,
    hours: int,
    *,
    gpu_index: int = 0,
    user: str = "alice",
    name: str = "train",
    minutes: int = 0,
) -> JobGpuStats:
    return JobGpuStats(
        idempotency_key=f"s{job_id}-{gpu_index}",
        job_id=job_id,
        job_name=name,
        user=user,
        account="nlp",
        node="gpu01",
        gpu_index=gpu_index,
        peak_mem_mb=peak_mem_mb,
        mean_util_pct=80.0,
        ended_at=T0 + timedelta(hours=hours, minutes=minutes),
    )


def snap(key: str, account: str, minutes: int, usage: float = 0.0) -> BudgetSnapshot:
    return BudgetSnapshot(
        idempotency_key=key,
        taken_at=T0 + timedelta(minutes=minutes),
        account=account,
        parent="ml",
        budget_share=0.25,
        usage_gpu_hours=usage,
        owed_gpu_hours=1.0,
    )


def store_with(*records: JobGpuStats | BudgetSnapshot) -> FakeStore:
    fake = FakeStore()
    for r in records:
        if isinstance(r, JobGpuStats):
            fake.record_job_gpu_stats(r)
        else:
            fake.record_budget_snapshot(r)
    return fake


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


# --- gpu_mem_profiles ---


def test_empty_store_has_no_profiles() -> None:
    assert FakeStore().gpu_mem_profiles() == []
    assert FakeStore().latest_budget_snapshots() == []


def test_a_multi_gpu_job_counts_once_with_its_largest_gpu() -> None:
    fake = store_with(
        gpu(1, 30_000, 0, gpu_index=0),
        gpu(1, 70_000, 0, gpu_index=1, minutes=1),
        gpu(1, 50_000, 0, gpu_index=2),
        gpu(2, 10_000, 1, gpu_index=0),
        gpu(2, 20_000, 1, gpu_index=1),
    )
    # per-job peaks 70_000 and 20_000 -> 20_000 + 0.95 * 50_000
    (profile,) = fake.gpu_mem_profiles()
    assert (profile.user, profile.job_name, profile.runs) == ("alice", "train", 2)
    assert profile.p95_mem_mb == pytest.approx(67_500.0)
    assert isinstance(profile.p95_mem_mb, float)


def test_runs_keeps_only_the_most_recent_jobs() -> None:
    # written out of time order: recency is by ended_at, not by insertion
    old_big = [gpu(j, 90_000, hours=j) for j in range(1, 4)]
    new_small = [gpu(j, 1_000 * j, hours=10 + j) for j in range(10, 15)]
    fake = store_with(*new_small, *old_big)
    assert fake.gpu_mem_profiles(runs=5) == [
        GpuMemProfile("alice", "train", percentile_cont([10e3, 11e3, 12e3, 13e3, 14e3], 0.95), 5)
    ]
    assert fake.gpu_mem_profiles(runs=1) == [GpuMemProfile("alice", "train", 14_000.0, 1)]
    everything = fake.gpu_mem_profiles(runs=100)
    assert everything[0].runs == 8
    assert everything[0].p95_mem_mb == pytest.approx(90_000.0)


def test_a_job_is_as_recent_as_its_last_gpu_and_ties_go_to_the_later_insert() -> None:
    fake = store_with(
        gpu(1, 5_000, hours=0, gpu_index=0),
        gpu(1, 5_000, hours=9, gpu_index=1),  # job 1 ended at hour 9
        gpu(2, 7_000, hours=5),
        gpu(3, 8_000, hours=9),  # same end as job 1, written later
    )
    assert fake.gpu_mem_profiles(runs=1) == [GpuMemProfile("alice", "train", 8_000.0, 1)]
    (two,) = fake.gpu_mem_profiles(runs=2)
    assert two.runs == 2
    assert two.p95_mem_mb == pytest.approx(5_000 + 0.95 * 3_000)


def test_one_profile_per_user_and_job_name_sorted() -> None:
    fake = store_with(
        gpu(1, 40_000, 0, user="bob", name="eval"),
        gpu(2, 10_000, 0, user="alice", name="train"),
        gpu(3, 30_000, 1, user="alice", name="train"),
        gpu(4, 20_000, 0, user="alice", name="eval"),
        gpu(5, 50_000, 0, user="alice", name=""),
        gpu(6, 60_000, 0, user="Zoe", name="train"),
    )
    got = fake.gpu_mem_profiles()
    assert [(p.user, p.job_name, p.runs) for p in got] == [
        ("Zoe", "train", 1),  # code-point order, like Python's sorted()
        ("alice", "", 1),
        ("alice", "eval", 1),
        ("alice", "train", 2),
        ("bob", "eval", 1),
    ]
    assert [p.p95_mem_mb for p in got] == pytest.approx([60e3, 50e3, 20e3, 29e3, 40e3])


def test_same_job_id_under_another_name_is_another_job() -> None:
    fake = store_with(
        gpu(7, 10_000, 0, name="a"),
        JobGpuStats(
            idempotency_key="other",
            job_id=7,
            job_name="b",
            user="alice",
            account="nlp",
            node="gpu02",
            gpu_index=0,
            peak_mem_mb=99_000,
            mean_util_pct=1.0,
            ended_at=T0,
        ),
    )
    assert fake.gpu_mem_profiles() == [
        GpuMemProfile("alice", "a", 10_000.0, 1),
        GpuMemProfile("alice", "b", 99_000.0, 1),
    ]


@pytest.mark.parametrize("runs", [0, -1, True, 2.5])
def test_runs_below_one_is_refused(runs: int) -> None:
    with pytest.raises(ValueError, match="runs must be"):
        FakeStore().gpu_mem_profiles(runs)


def test_profiles_and_latest_snapshots_need_the_store() -> None:
    fake = store_with(gpu(1, 1, 0), snap("b", "nlp", 0))
    fake.set_available(False)
    with pytest.raises(StoreUnavailable):
        fake.gpu_mem_profiles()
    with pytest.raises(StoreUnavailable):
        fake.latest_budget_snapshots()


def test_gpu_mem_profile_is_frozen() -> None:
    profile = GpuMemProfile("alice", "train", 1.0, 1)
    with pytest.raises(AttributeError):
        profile.runs = 2  # type: ignore[misc]


# --- latest_budget_snapshots ---


def test_latest_snapshot_per_account_sorted_by_account() -> None:
    fake = store_with(
        snap("v1", "vision", 0),
        snap("n2", "nlp", 10, usage=2.0),
        snap("n1", "nlp", 5, usage=1.0),  # older, written later
        snap("v2", "vision", 20),
        snap("d1", "detection", 1),
    )
    assert [s.idempotency_key for s in fake.latest_budget_snapshots()] == ["d1", "n2", "v2"]


def test_latest_snapshot_ties_go_to_the_later_insert() -> None:
    fake = store_with(snap("first", "nlp", 5), snap("second", "nlp", 5), snap("old", "nlp", 1))
    assert [s.idempotency_key for s in fake.latest_budget_snapshots()] == ["second"]


# --- SpoolingStore ---


def test_spooling_store_passes_the_new_reads_through(tmp_path: Path) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    for r in (gpu(1, 10_000, 0), gpu(2, 20_000, 1), snap("a", "nlp", 0), snap("b", "nlp", 1)):
        if isinstance(r, JobGpuStats):
            store.record_job_gpu_stats(r)
        else:
            store.record_budget_snapshot(r)
    assert store.gpu_mem_profiles() == fake.gpu_mem_profiles()
    assert store.gpu_mem_profiles(runs=1) == [GpuMemProfile("alice", "train", 20_000.0, 1)]
    assert (
        store.latest_budget_snapshots() == fake.latest_budget_snapshots() == [snap("b", "nlp", 1)]
    )
    with pytest.raises(ValueError, match="runs must be"):
        store.gpu_mem_profiles(0)
