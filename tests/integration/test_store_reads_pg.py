"""The admission policy's reads on a real PostgreSQL give exactly what FakeStore gives, on
records with many users, names, multi-GPU jobs and ties.

The reads' hand-checked cases are the contract suite (tests/store_contract.py), which
test_store_contract_pg.py runs over PostgresStore. ``pg_dsn`` (tests/conftest.py) gives
each test a fresh, empty database.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from builders import budget_snapshot, job_gpu_stats
from store_contract import assert_same_profiles

from slurm_ml.store import (
    BudgetSnapshot,
    FakeStore,
    JobGpuStats,
    PostgresStore,
    Record,
    migrate,
    write_record,
)

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    migrate(pg_dsn)
    with PostgresStore(pg_dsn) as s:
        yield s


def gpu(
    key: str,
    job_id: int,
    peak_mem_mb: int,
    ended_at: datetime,
    *,
    user: str = "alice",
    name: str = "train",
    gpu_index: int = 0,
) -> JobGpuStats:
    return job_gpu_stats(key, job_id=job_id, job_name=name, user=user,
                         node=f"gpu0{gpu_index % 6 + 1}", gpu_index=gpu_index,
                         peak_mem_mb=peak_mem_mb, mean_util_pct=75.0, ended_at=ended_at)


def snap(key: str, account: str, taken_at: datetime, usage: float) -> BudgetSnapshot:
    return budget_snapshot(key, account=account, taken_at=taken_at,
                           parent=None if account == "ml" else "ml", usage_gpu_hours=usage,
                           owed_gpu_hours=2.5, site_factor=int(usage) - 10)


def job_records() -> list[Record]:
    """Several users and names, multi-GPU jobs, ties on ended_at, more jobs than ``runs``."""
    out: list[Record] = []
    users = ("alice", "bob", "Carol", "dave")
    names = ("train", "eval", "", "llama-ft")
    job_id = 1000
    for u, user in enumerate(users):
        for n, name in enumerate(names[: u + 1]):
            for k in range(3 + 7 * u + n):  # 3..27 jobs per (user, name)
                job_id += 1
                ended = T0 + timedelta(minutes=(k // 2) * 7 + u)  # pairs tie on ended_at
                for g in range(1 + (job_id % 4)):  # 1..4 GPUs, different peaks
                    peak = (job_id * 7919 + g * 104729) % 81_920
                    # a later GPU of the job may end later: the job ends with its last GPU
                    at = ended + timedelta(seconds=g * (job_id % 3))
                    out.append(gpu(f"s{job_id}-{g}", job_id, peak, at, user=user, name=name))
    return out


def budget_records() -> list[Record]:
    out: list[Record] = []
    for i in range(30):
        account = ("ml", "nlp", "llm-pretrain", "vision", "Detection")[i % 5]
        at = T0 + timedelta(minutes=i // 10)  # b0 and b5 tie on taken_at, b10 and b15, ...
        out.append(snap(f"b{i}", account, at, float(i)))
    return out


def write_both(pg: PostgresStore, fake: FakeStore, records: list[Record]) -> None:
    for r in records:
        write_record(pg, r)
        write_record(fake, r)


def test_gpu_mem_profiles_match_the_fake(store: PostgresStore) -> None:
    fake = FakeStore()
    records = job_records()
    # out of time order, and once in order: recency must come from ended_at, not inserts
    write_both(store, fake, records[::2] + records[1::2])
    for runs in (1, 2, 3, 5, 20, 1000):
        pg, fk = store.gpu_mem_profiles(runs), fake.gpu_mem_profiles(runs)
        assert len(pg) == 10
        assert_same_profiles(pg, fk)
    assert_same_profiles(store.gpu_mem_profiles(), fake.gpu_mem_profiles(20))
    assert max(p.runs for p in store.gpu_mem_profiles()) == 20  # the limit bit somewhere


def test_latest_budget_snapshots_match_the_fake(store: PostgresStore) -> None:
    fake = FakeStore()
    records = budget_records()
    write_both(store, fake, records)
    latest = store.latest_budget_snapshots()
    assert latest == fake.latest_budget_snapshots()
    assert [s.account for s in latest] == ["Detection", "llm-pretrain", "ml", "nlp", "vision"]
    # within an account the newest taken_at wins, and of equal ones the later insert
    assert {s.account: s.idempotency_key for s in latest}["ml"] == "b25"
    write_both(store, fake, [snap("late", "nlp", T0 + timedelta(minutes=6), 99.0)])
    assert store.latest_budget_snapshots() == fake.latest_budget_snapshots()
    assert {s.account: s.idempotency_key for s in store.latest_budget_snapshots()}["nlp"] == "late"


