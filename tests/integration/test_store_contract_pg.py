"""The Store and LeaderLock contracts (tests/store_contract.py) over PostgresStore and
PgLeaderLock on a real PostgreSQL; tests/unit/test_store_contract_fake.py runs the same
suite over the fakes.

The store tests share one migrated database (``pg_module_dsn``), emptied before each test;
the lock tests get a fresh database each (``pg_locks``).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from store_contract import LeaderLockContract, RowCount, StoreContract

from slurm_ml.store import (
    AuditEntry,
    BudgetSnapshot,
    HealthEvent,
    JobGpuStats,
    PgLeaderLock,
    PostgresStore,
    ReconcilerDecision,
    Record,
    Store,
    UtilSample,
    migrate,
)

pytestmark = pytest.mark.integration

TABLES: dict[type[Record], str] = {
    HealthEvent: "health_events",
    JobGpuStats: "job_gpu_stats",
    UtilSample: "util_samples",
    BudgetSnapshot: "budget_snapshots",
    ReconcilerDecision: "decisions",
    AuditEntry: "audit_log",
}


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


@pytest.fixture(scope="module")
def contract_dsn(pg_module_dsn: str) -> str:
    migrate(pg_module_dsn)
    return pg_module_dsn


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self, contract_dsn: str) -> Iterator[PostgresStore]:
        empty = sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
            sql.SQL(", ").join(sql.Identifier(t) for t in TABLES.values()))
        with psycopg.connect(contract_dsn, autocommit=True) as conn:
            conn.execute(empty)
        with PostgresStore(contract_dsn) as s:
            yield s

    @pytest.fixture
    def row_count(self, contract_dsn: str) -> RowCount:
        return lambda cls: count_rows(contract_dsn, TABLES[cls])

    @pytest.fixture
    def down_store(self, contract_dsn: str) -> Store:
        unreachable = make_conninfo(contract_dsn, host="127.0.0.1", port=str(closed_port()))
        return PostgresStore(unreachable, connect_timeout_s=2)


class TestPgLeaderLock(LeaderLockContract):
    @pytest.fixture
    def locks(self, pg_locks: tuple[PgLeaderLock, PgLeaderLock]
              ) -> tuple[PgLeaderLock, PgLeaderLock]:
        return pg_locks
