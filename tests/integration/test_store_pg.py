"""PostgresStore, migrate and the spool against a real PostgreSQL.

``pg_dsn`` (tests/conftest.py) gives each test a fresh, empty database.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from slurm_ml.store import (
    AuditEntry,
    BudgetSnapshot,
    DrainResult,
    FakeStore,
    HealthEvent,
    JobGpuStats,
    Migration,
    MigrationError,
    PostgresStore,
    ReconcilerDecision,
    Record,
    SpoolingStore,
    Store,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
    UtilSample,
    WriteOutcome,
    load_migrations,
    migrate,
    write_record,
)

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
TABLES = {
    "health_events": HealthEvent,
    "job_gpu_stats": JobGpuStats,
    "util_samples": UtilSample,
    "budget_snapshots": BudgetSnapshot,
    "decisions": ReconcilerDecision,
    "audit_log": AuditEntry,
}


def one_of_each(tag: str = "") -> list[Record]:
    """One record per table, with optional fields both set and unset."""
    cet = timezone(timedelta(hours=1))
    return [
        HealthEvent(
            idempotency_key=f"h{tag}",
            node="gpu01",
            check_id="row_remap",
            severity="drain",
            message="row remapping failure on GPU 3 — pending",
            observed_at=T0.astimezone(cet),
            gpu_index=3,
            details={"pending": True, "correctable": 0, "ids": [1, 2], "ratio": 0.1},
        ),
        HealthEvent(
            idempotency_key=f"h2{tag}",
            node="gpu02",
            check_id="gpu_count",
            severity="drain",
            message="",
            observed_at=T0,
        ),
        JobGpuStats(
            idempotency_key=f"s{tag}",
            job_id=2**40,
            job_name="llama-ft",
            user="alice",
            account="nlp",
            node="gpu01",
            gpu_index=7,
            peak_mem_mb=79_000,
            mean_util_pct=93.25,
            ended_at=T0,
            started_at=T0 - timedelta(hours=5),
            gpu_type="a100_80g",
        ),
        UtilSample(
            idempotency_key=f"u{tag}",
            job_id=42,
            node="gpu01",
            gpu_index=0,
            sampled_at=T0,
            util_pct=0.0,
            mem_used_mb=30_000,
        ),
        BudgetSnapshot(
            idempotency_key=f"b{tag}",
            taken_at=T0,
            account="nlp",
            parent="research",
            budget_share=0.125,
            usage_gpu_hours=1234.5,
            owed_gpu_hours=1300.0,
            site_factor=-5,
        ),
        BudgetSnapshot(
            idempotency_key=f"b2{tag}",
            taken_at=T0,
            account="org",
            parent=None,
            budget_share=1.0,
            usage_gpu_hours=0.0,
            owed_gpu_hours=0.0,
        ),
        ReconcilerDecision(
            idempotency_key=f"d{tag}",
            cycle=17,
            job_id=42,
            kind="requeue",
            reason="over-served after min runtime",
            decided_at=T0,
            dry_run=True,
            details={"victim_share": 1.4, "preemptor": 43},
        ),
        ReconcilerDecision(
            idempotency_key=f"d2{tag}",
            cycle=17,
            job_id=None,
            kind="drain",
            reason="slurm-ml: nvlink gpu3",
            decided_at=T0,
            dry_run=False,
        ),
        AuditEntry(
            idempotency_key=f"a{tag}",
            actor="root",
            action="resume",
            target="gpu02",
            at=T0,
            details={"why": "manual"},
        ),
    ]


def count_rows(dsn: str, table: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dsn_with(dsn: str, **changes: Any) -> str:
    return make_conninfo(dsn, **changes)


SHIPPED = [m.version for m in load_migrations()]


def after_shipped(name: str) -> str:
    """A migration version numbered after every shipped one."""
    return f"{len(SHIPPED) + 1:04d}_{name}"


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    migrate(pg_dsn)
    with PostgresStore(pg_dsn) as s:
        yield s


# --- migrations ---


def test_migrate_twice_is_idempotent(pg_dsn: str) -> None:
    assert SHIPPED[:2] == ["0001_init", "0002_window_reads"]
    assert migrate(pg_dsn) == SHIPPED
    assert migrate(pg_dsn) == []
    with psycopg.connect(pg_dsn) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        }
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
    assert set(TABLES) | {"schema_migrations"} <= tables
    assert sorted(versions) == SHIPPED


def test_concurrent_migrators_apply_each_migration_once(pg_dsn: str) -> None:
    more = after_shipped("more")
    extra = [*load_migrations(), Migration(more, "CREATE TABLE more_t (x int);")]
    barrier = threading.Barrier(4)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(migrate(pg_dsn, migrations=extra))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = sorted(v for r in results for v in r)
    assert applied == [*SHIPPED, more]


def test_migrate_accepts_an_idle_connection_and_restores_it(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        assert conn.autocommit is False
        assert migrate(conn) == SHIPPED
        assert conn.autocommit is False
        conn.execute("SELECT 1")  # opens a transaction
        with pytest.raises(MigrationError, match="idle"):
            migrate(conn)


def test_failed_migration_rolls_back_and_keeps_earlier_ones(pg_dsn: str) -> None:
    bad = Migration(
        after_shipped("bad"), "CREATE TABLE half_done (x int);\nSELECT no_such_function();"
    )
    with pytest.raises(MigrationError, match=f"{bad.version} failed") as info:
        migrate(pg_dsn, migrations=[*load_migrations(), bad])
    assert info.value.sqlstate == "42883"
    with psycopg.connect(pg_dsn) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
        half = conn.execute("SELECT to_regclass('half_done')").fetchone()
    assert sorted(versions) == SHIPPED
    assert half == (None,)


def test_edited_or_unknown_migrations_are_refused(pg_dsn: str) -> None:
    migrate(pg_dsn)
    init, *rest = load_migrations()
    edited = Migration(init.version, init.sql + "\n-- edited\n")
    with pytest.raises(MigrationError, match="edited after it was applied"):
        migrate(pg_dsn, migrations=[edited, *rest])
    migrate(pg_dsn, migrations=[init, *rest, Migration(after_shipped("x"), "SELECT 1;")])
    with pytest.raises(MigrationError, match="does not know"):
        migrate(pg_dsn)


# --- round trips and idempotency ---


def test_every_record_round_trips(store: PostgresStore) -> None:
    records = one_of_each()
    for r in records:
        assert write_record(store, r) is WriteOutcome.LANDED
    h1, h2, s, u, b1, b2, d1, _node_decision, a = records  # no reader for job-less ones
    assert store.recent_health_events() == [h2, h1]  # same time: newest insert first
    assert store.job_gpu_stats_for("alice", "llama-ft") == [s]
    assert store.util_samples_for(42) == [u]
    assert store.budget_snapshots() == [b1, b2]
    assert store.decisions_for_job(42) == [d1]
    assert store.audit_entries() == [a]
    got = store.recent_health_events()[1]
    assert got.observed_at.tzinfo is not None and got.observed_at.utcoffset() == timedelta(0)
    assert got.details == {"pending": True, "correctable": 0, "ids": [1, 2], "ratio": 0.1}


def test_same_key_twice_is_one_row(store: PostgresStore, pg_dsn: str) -> None:
    for r in one_of_each():
        assert write_record(store, r) is WriteOutcome.LANDED
        assert write_record(store, r) is WriteOutcome.DUPLICATE
    expected = {t: sum(1 for r in one_of_each() if isinstance(r, cls)) for t, cls in TABLES.items()}
    for table, n in expected.items():
        assert count_rows(pg_dsn, table) == n


def test_readers_match_the_fake(store: PostgresStore) -> None:
    """Filters, bounds, limits and tie ordering are the same in both implementations."""
    fake = FakeStore()
    records: list[Record] = []
    for i in range(12):
        at = T0 + timedelta(minutes=i // 3)  # ties on purpose
        records += [
            HealthEvent(
                idempotency_key=f"h{i}",
                node=f"gpu{i % 3}",
                check_id="c",
                severity="flag",
                message="m",
                observed_at=at,
            ),
            JobGpuStats(
                idempotency_key=f"s{i}",
                job_id=i,
                job_name=f"job{i % 2}",
                user=f"user{i % 3}",
                account="a",
                node="n",
                gpu_index=0,
                peak_mem_mb=i,
                mean_util_pct=50.0,
                ended_at=at,
            ),
            UtilSample(
                idempotency_key=f"u{i}",
                job_id=i % 2,
                node="n",
                gpu_index=i % 4,
                sampled_at=at,
                util_pct=1.0,
                mem_used_mb=i,
            ),
            BudgetSnapshot(
                idempotency_key=f"b{i}",
                taken_at=at,
                account=f"acct{i % 2}",
                parent=None,
                budget_share=0.5,
                usage_gpu_hours=float(i),
                owed_gpu_hours=1.0,
            ),
            ReconcilerDecision(
                idempotency_key=f"d{i}",
                cycle=i,
                job_id=i % 3,
                kind="k",
                reason="r",
                decided_at=at,
                dry_run=bool(i % 2),
            ),
            AuditEntry(idempotency_key=f"a{i}", actor="x", action="y", target="z", at=at),
        ]
    for r in reversed(records):
        write_record(store, r)
        write_record(fake, r)
    since = T0 + timedelta(minutes=2)
    both: list[Store] = [store, fake]
    filters: list[dict[str, Any]] = [
        {},
        {"node": "gpu1"},
        {"since": since},
        {"node": "gpu2", "since": since},
    ]
    for args in filters:
        for limit in (1000, 2):
            pg, fk = (s.recent_health_events(**args, limit=limit) for s in both)
            assert pg == fk
    for user in ("user0", "user1"):
        assert store.job_gpu_stats_for(user, "job0", 3) == fake.job_gpu_stats_for(user, "job0", 3)
    for job in (0, 1, 2):
        assert store.decisions_for_job(job) == fake.decisions_for_job(job)
        assert store.util_samples_for(job) == fake.util_samples_for(job)
        assert store.util_samples_for(job, since) == fake.util_samples_for(job, since)
    assert store.audit_entries() == fake.audit_entries()
    assert store.audit_entries(since) == fake.audit_entries(since)
    for account in (None, "acct1"):
        for bound in (None, since):
            assert store.budget_snapshots(account, bound) == fake.budget_snapshots(account, bound)


# --- outages and errors ---


def test_outage_then_drain_lands_each_record_exactly_once(
    store: PostgresStore, pg_dsn: str, tmp_path: Path
) -> None:
    down = PostgresStore(dsn_with(pg_dsn, host="127.0.0.1", port=str(closed_port())))
    spooling = SpoolingStore(down, tmp_path)
    records = one_of_each()
    already = records[0]
    assert write_record(store, already) is WriteOutcome.LANDED  # landed, then spooled again
    for r in records:
        assert write_record(spooling, r) is WriteOutcome.SPOOLED
    assert write_record(spooling, records[1]) is WriteOutcome.SPOOLED  # spooled twice

    recovered = SpoolingStore(store, tmp_path)  # e.g. the daemon after the database is back
    result = recovered.drain()
    assert result == DrainResult(landed=len(records) - 1, duplicates=2, remaining=0)
    assert recovered.drain() == DrainResult(0, 0, 0)
    for table, cls in TABLES.items():
        assert count_rows(pg_dsn, table) == sum(1 for r in records if isinstance(r, cls))
    assert store.recent_health_events() == [records[1], records[0]]  # newest insert first


def test_unreachable_dsn_gives_a_clear_store_unavailable(pg_dsn: str) -> None:
    port = closed_port()
    dsn = f"postgresql://slurmml:s3cret-pw@127.0.0.1:{port}/ledger"
    s = PostgresStore(dsn, connect_timeout_s=2)
    with pytest.raises(StoreUnavailable) as info:
        s.audit(AuditEntry(idempotency_key="a", actor="x", action="y", target="z", at=T0))
    msg = str(info.value)
    assert f"127.0.0.1:{port}/ledger" in msg
    assert "s3cret-pw" not in msg and "s3cret-pw" not in repr(info.value)
    assert info.value.target == f"127.0.0.1:{port}/ledger"
    assert "s3cret-pw" not in repr(s)
    with pytest.raises(StoreUnavailable):
        migrate(dsn, connect_timeout_s=2)


def test_wrong_password_gives_store_unavailable_without_the_password(pg_dsn: str) -> None:
    params = conninfo_to_dict(pg_dsn)
    params["password"] = "definitely-wrong-pw"
    dsn = make_conninfo("", **params)
    migrate(pg_dsn)
    with pytest.raises(StoreUnavailable) as info:
        PostgresStore(dsn).recent_health_events()
    assert "definitely-wrong-pw" not in str(info.value)


def test_lost_connection_is_retried_once_on_a_fresh_one(store: PostgresStore, pg_dsn: str) -> None:
    h1, h2 = one_of_each()[:2]
    assert isinstance(h1, HealthEvent) and isinstance(h2, HealthEvent)
    assert store.record_health_event(h1) is WriteOutcome.LANDED
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    assert store.record_health_event(h2) is WriteOutcome.LANDED
    assert len(store.recent_health_events()) == 2


def test_refused_data_is_a_store_integrity_error(store: PostgresStore) -> None:
    bad = one_of_each()[0]
    assert isinstance(bad, HealthEvent)
    object.__setattr__(bad, "gpu_index", -1)  # bypass validation to reach the CHECK constraint
    with pytest.raises(StoreIntegrityError) as info:
        store.record_health_event(bad)
    assert info.value.sqlstate == "23514"
    assert not isinstance(info.value.__cause__, StoreError)  # the driver error is only the cause


def test_unmigrated_database_says_so(pg_dsn: str) -> None:
    with PostgresStore(pg_dsn) as s, pytest.raises(StoreError, match="run migrations") as info:
        s.audit_entries()
    assert not isinstance(info.value, StoreUnavailable)


def test_invalid_dsn_and_closed_store(pg_dsn: str) -> None:
    with pytest.raises(StoreError, match="invalid PostgreSQL DSN") as info:
        PostgresStore("host=x password=hunter22 nonsense")
    assert "hunter22" not in str(info.value)
    s = PostgresStore(pg_dsn)
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.audit_entries()
