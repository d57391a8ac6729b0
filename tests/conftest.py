"""Shared fixtures.

Integration tests run against the real dev cluster and its PostgreSQL, found
through the environment that `slurm-ml devcluster env` prints (``make test``
sources it). They fail, loudly, when it is missing: a skipped integration
test is not a passing one.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from slurm_ml.store import PgLeaderLock

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PG_LOCK_KEY = 0x736C_6D6C_7465_7374  # "slmltest"


#: A unit test needs no cluster and waits on nothing: one that takes longer than this is
#: slow or stuck, and says so instead of holding a run for pyproject's 300 s. A unit
#: test that must take longer carries its own @pytest.mark.timeout(...), with why.
UNIT_TIMEOUT_S = 30


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests (neither integration nor compose) time out after UNIT_TIMEOUT_S."""
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        if item.get_closest_marker("integration") or item.get_closest_marker("compose"):
            continue
        item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))


def _need(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        pytest.fail(
            f"${var} is not set: integration tests need the dev cluster. Run `make test`, or "
            f"`slurm-ml devcluster up` then `eval \"$(slurm-ml devcluster env)\"`.",
            pytrace=False,
        )
    return value


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    return _need("SLURM_CONF")


@pytest.fixture(scope="session")
def admin_dsn() -> str:
    return _need("SLURM_ML_DSN")


@contextlib.contextmanager
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """DSN of a new, empty database, dropped on exit."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        _drop_database(admin_dsn, name)


def _drop_database(admin_dsn: str, name: str, timeout_s: float = 30) -> None:
    """DROP DATABASE ... WITH (FORCE), which fails for a role that is not a superuser
    while an autovacuum worker (a superuser's backend) works on the database: seen in CI
    (``InsufficientPrivilege: must be a member of the role whose process is being
    terminated``). A plain DROP makes autovacuum leave, so retry with that."""
    import psycopg
    from psycopg import sql

    force = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    plain = sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))
    deadline = time.monotonic() + timeout_s
    query = force
    while True:
        try:
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                conn.execute(query)
            return
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ObjectInUse):
            if time.monotonic() >= deadline:
                raise
            query = plain if query is force else force
            time.sleep(1)


@pytest.fixture
def pg_dsn(admin_dsn: str) -> Iterator[str]:
    """DSN of a fresh, empty database, dropped after the test."""
    with fresh_database(admin_dsn) as dsn:
        yield dsn


@pytest.fixture(scope="module")
def pg_module_dsn(admin_dsn: str) -> Iterator[str]:
    """DSN of a fresh, empty database that the tests of one module share."""
    with fresh_database(admin_dsn) as dsn:
        yield dsn


@pytest.fixture
def pg_locks(pg_dsn: str) -> Iterator[tuple[PgLeaderLock, PgLeaderLock]]:
    """Two PgLeaderLock sessions, holders test-a and test-b, contending for one key of a
    fresh database (advisory locks are per database: nothing else contends)."""
    from slurm_ml.store import PgLeaderLock

    a = PgLeaderLock(pg_dsn, PG_LOCK_KEY, holder="test-a")
    b = PgLeaderLock(pg_dsn, PG_LOCK_KEY, holder="test-b")
    yield a, b
    a.release()
    b.release()
