"""FakeStore: same idempotency, filters and ordering as PostgresStore, plus failure knobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slurm_ml.store import (
    AuditEntry,
    BudgetSnapshot,
    FakeStore,
    HealthEvent,
    JobGpuStats,
    ReconcilerDecision,
    Store,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
    UtilSample,
    WriteOutcome,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def ev(key: str, node: str = "gpu01", minutes: int = 0) -> HealthEvent:
    return HealthEvent(
        idempotency_key=key,
        node=node,
        check_id="nvlink",
        severity="flag",
        message="link down",
        observed_at=T0 + timedelta(minutes=minutes),
        gpu_index=3,
        details={"links_active": 11},
    )


def stats(
    key: str, job_id: int, hours: int, user: str = "alice", name: str = "train"
) -> JobGpuStats:
    return JobGpuStats(
        idempotency_key=key,
        job_id=job_id,
        job_name=name,
        user=user,
        account="nlp",
        node="gpu01",
        gpu_index=0,
        peak_mem_mb=40_000,
        mean_util_pct=87.5,
        ended_at=T0 + timedelta(hours=hours),
    )


def decision(key: str, job_id: int | None, minutes: int) -> ReconcilerDecision:
    return ReconcilerDecision(
        idempotency_key=key,
        cycle=minutes,
        job_id=job_id,
        kind="requeue",
        reason="over-served",
        decided_at=T0 + timedelta(minutes=minutes),
        dry_run=False,
    )


def audit(key: str, minutes: int) -> AuditEntry:
    return AuditEntry(
        idempotency_key=key,
        actor="slurm-ml",
        action="resume",
        target="gpu02",
        at=T0 + timedelta(minutes=minutes),
    )


def sample(key: str, job_id: int, minutes: int) -> UtilSample:
    return UtilSample(
        idempotency_key=key,
        job_id=job_id,
        node="gpu01",
        gpu_index=1,
        sampled_at=T0 + timedelta(minutes=minutes),
        util_pct=0.0,
        mem_used_mb=30_000,
    )


def snapshot(key: str, account: str, minutes: int) -> BudgetSnapshot:
    return BudgetSnapshot(
        idempotency_key=key,
        taken_at=T0 + timedelta(minutes=minutes),
        account=account,
        parent="org",
        budget_share=0.25,
        usage_gpu_hours=10.0,
        owed_gpu_hours=12.5,
        site_factor=1000,
    )


def test_fake_satisfies_the_protocol() -> None:
    assert isinstance(FakeStore(), Store)


def test_same_key_lands_once_per_record_type() -> None:
    fake = FakeStore()
    assert fake.record_health_event(ev("k")) is WriteOutcome.LANDED
    assert fake.record_health_event(ev("k", node="other")) is WriteOutcome.DUPLICATE
    # keys are unique per table, as in PostgreSQL
    assert fake.audit(audit("k", 0)) is WriteOutcome.LANDED
    assert fake.rows(HealthEvent) == [ev("k")]
    assert len(fake.rows(AuditEntry)) == 1


def test_every_writer_and_reader_round_trips() -> None:
    fake = FakeStore()
    fake.record_health_event(ev("h"))
    fake.record_job_gpu_stats(stats("s", 7, 1))
    fake.record_util_sample(sample("u", 7, 1))
    fake.record_budget_snapshot(snapshot("b", "nlp", 1))
    fake.record_decision(decision("d", 7, 1))
    fake.audit(audit("a", 1))
    assert fake.recent_health_events() == [ev("h")]
    assert fake.job_gpu_stats_for("alice", "train") == [stats("s", 7, 1)]
    assert fake.util_samples_for(7) == [sample("u", 7, 1)]
    assert fake.budget_snapshots() == [snapshot("b", "nlp", 1)]
    assert fake.decisions_for_job(7) == [decision("d", 7, 1)]
    assert fake.audit_entries() == [audit("a", 1)]


def test_health_events_filter_and_order_newest_first() -> None:
    fake = FakeStore()
    for key, node, minutes in [("a", "n1", 0), ("b", "n2", 5), ("c", "n1", 10), ("d", "n1", 10)]:
        fake.record_health_event(ev(key, node, minutes))
    keys = [e.idempotency_key for e in fake.recent_health_events()]
    assert keys == ["d", "c", "b", "a"]  # ties broken by insertion order, newest first
    assert [e.idempotency_key for e in fake.recent_health_events(node="n1")] == ["d", "c", "a"]
    since = T0 + timedelta(minutes=5)
    assert [e.idempotency_key for e in fake.recent_health_events(since=since)] == ["d", "c", "b"]
    assert [e.idempotency_key for e in fake.recent_health_events("n2", since)] == ["b"]
    assert [e.idempotency_key for e in fake.recent_health_events(limit=1)] == ["d"]
    with pytest.raises(ValueError):
        fake.recent_health_events(since=datetime(2025, 1, 1))
    with pytest.raises(ValueError):
        fake.recent_health_events(limit=-1)


def test_job_gpu_stats_newest_first_with_limit() -> None:
    fake = FakeStore()
    fake.record_job_gpu_stats(stats("1", 1, hours=1))
    fake.record_job_gpu_stats(stats("2", 2, hours=3))
    fake.record_job_gpu_stats(stats("3", 3, hours=2))
    fake.record_job_gpu_stats(stats("4", 4, hours=9, user="bob"))
    fake.record_job_gpu_stats(stats("5", 5, hours=9, name="eval"))
    assert [s.job_id for s in fake.job_gpu_stats_for("alice", "train", limit=10)] == [2, 3, 1]
    assert [s.job_id for s in fake.job_gpu_stats_for("alice", "train", limit=2)] == [2, 3]


def test_decisions_audit_util_budget_oldest_first() -> None:
    fake = FakeStore()
    fake.record_decision(decision("d2", 7, 5))
    fake.record_decision(decision("d1", 7, 1))
    fake.record_decision(decision("dx", 8, 0))
    fake.record_decision(decision("node", None, 0))
    assert [d.idempotency_key for d in fake.decisions_for_job(7)] == ["d1", "d2"]
    fake.audit(audit("a2", 2))
    fake.audit(audit("a1", 1))
    assert [a.idempotency_key for a in fake.audit_entries()] == ["a1", "a2"]
    assert [a.idempotency_key for a in fake.audit_entries(T0 + timedelta(minutes=2))] == ["a2"]
    fake.record_util_sample(sample("u2", 7, 2))
    fake.record_util_sample(sample("u1", 7, 1))
    fake.record_util_sample(sample("u9", 9, 1))
    assert [u.idempotency_key for u in fake.util_samples_for(7)] == ["u1", "u2"]
    assert [u.idempotency_key for u in fake.util_samples_for(7, T0 + timedelta(minutes=2))] == [
        "u2"
    ]
    fake.record_budget_snapshot(snapshot("b2", "nlp", 2))
    fake.record_budget_snapshot(snapshot("b1", "vision", 1))
    assert [b.idempotency_key for b in fake.budget_snapshots()] == ["b1", "b2"]
    assert [b.idempotency_key for b in fake.budget_snapshots("nlp")] == ["b2"]
    assert fake.budget_snapshots("nlp", T0 + timedelta(minutes=3)) == []


def test_outage_makes_writes_and_reads_unavailable() -> None:
    fake = FakeStore()
    fake.set_available(False)
    with pytest.raises(StoreUnavailable, match="simulated outage"):
        fake.record_health_event(ev("k"))
    with pytest.raises(StoreUnavailable):
        fake.recent_health_events()
    assert fake.rows(HealthEvent) == []
    fake.set_available(True)
    assert fake.record_health_event(ev("k")) is WriteOutcome.LANDED


def test_lost_ack_commits_then_raises() -> None:
    fake = FakeStore()
    fake.lose_next_ack()
    with pytest.raises(StoreUnavailable):
        fake.record_health_event(ev("k"))
    assert fake.rows(HealthEvent) == [ev("k")]
    assert fake.record_health_event(ev("k")) is WriteOutcome.DUPLICATE


def test_injected_failures_do_not_land() -> None:
    fake = FakeStore()
    fake.fail_next_writes(StoreIntegrityError("refused"), n=2)
    for _ in range(2):
        with pytest.raises(StoreIntegrityError):
            fake.audit(audit("a", 0))
    assert fake.audit(audit("a", 0)) is WriteOutcome.LANDED
    assert fake.write_attempts == 3


def test_closed_store_refuses_use() -> None:
    fake = FakeStore()
    fake.close()
    with pytest.raises(StoreError, match="closed"):
        fake.audit(audit("a", 0))
