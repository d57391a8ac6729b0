"""What only PostgresStore has, against a real PostgreSQL: migrations, agreement with
FakeStore on many ties, reconnects, the server's refusals and its errors.

What every Store must do is the contract suite (tests/store_contract.py), which
test_store_contract_pg.py runs over PostgresStore. ``pg_dsn`` (tests/conftest.py) gives
each test a fresh, empty database.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from builders import (
    at,
    audit_entry,
    budget_snapshot,
    decision,
    health_event,
    job_gpu_stats,
    one_of_each,
    util_sample,
)
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from slurm_ml.store import (
    FakeStore,
    HealthEvent,
    Migration,
    MigrationError,
    PostgresStore,
    Record,
    Store,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
    WriteOutcome,
    load_migrations,
    migrate,
    write_record,
)
from slurm_ml.store.migrate import MIGRATION_LOCK_KEY

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
TABLES = ("health_events", "job_gpu_stats", "util_samples", "budget_snapshots", "decisions",
          "audit_log")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    heard: list[str] = []
    assert migrate(pg_dsn, say=heard.append) == SHIPPED
    assert heard == [f"applying {v} ..." for v in SHIPPED]  # progress, one line each
    assert migrate(pg_dsn, say=heard.append) == [] and len(heard) == len(SHIPPED)
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


def test_a_migrator_behind_anothers_lock_says_it_waits(pg_dsn: str) -> None:
    heard: list[str] = []
    with psycopg.connect(pg_dsn) as holder:  # another migrator, mid-transaction
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        waiter = threading.Thread(target=lambda: migrate(pg_dsn, say=heard.append))
        waiter.start()
        deadline = time.monotonic() + 10
        while not heard and time.monotonic() < deadline:
            time.sleep(0.05)
        assert heard and heard[0].startswith("waiting for another migrator's lock at ")
        assert waiter.is_alive()  # still waiting while the lock is held
        holder.rollback()
    waiter.join(30)
    assert not waiter.is_alive() and heard[1:] == [f"applying {v} ..." for v in SHIPPED]


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


# --- agreement with FakeStore ---


def test_readers_match_the_fake(store: PostgresStore) -> None:
    """Filters, bounds, limits and tie ordering are the same in both implementations."""
    fake = FakeStore()
    records: list[Record] = []
    for i in range(12):
        t = at(i // 3, base=T0)  # ties on purpose
        records += [
            health_event(f"h{i}", node=f"gpu{i % 3}", observed_at=t),
            job_gpu_stats(f"s{i}", job_id=i, job_name=f"job{i % 2}", user=f"user{i % 3}",
                          peak_mem_mb=i, ended_at=t),
            util_sample(f"u{i}", job_id=i % 2, gpu_index=i % 4, sampled_at=t, mem_used_mb=i),
            budget_snapshot(f"b{i}", account=f"acct{i % 2}", taken_at=t, parent=None,
                            usage_gpu_hours=float(i)),
            decision(f"d{i}", cycle=i, job_id=i % 3, decided_at=t, dry_run=bool(i % 2)),
            audit_entry(f"a{i}", at=t),
        ]
    for r in reversed(records):
        write_record(store, r)
        write_record(fake, r)
    since = at(2, base=T0)
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


def test_unreachable_dsn_gives_a_clear_store_unavailable(pg_dsn: str) -> None:
    port = closed_port()
    dsn = f"postgresql://slurmml:s3cret-pw@127.0.0.1:{port}/ledger"
    s = PostgresStore(dsn, connect_timeout_s=2)
    with pytest.raises(StoreUnavailable) as info:
        s.audit(audit_entry("a"))
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
    h1, h2 = one_of_each(t0=T0)[:2]
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
    bad = one_of_each(t0=T0)[0]
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


def test_invalid_dsn_is_refused_without_the_password() -> None:
    with pytest.raises(StoreError, match="invalid PostgreSQL DSN") as info:
        PostgresStore("host=x password=hunter22 nonsense")
    assert "hunter22" not in str(info.value)
