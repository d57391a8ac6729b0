"""Shared fixtures.

Integration tests run against the real dev cluster and its PostgreSQL, found
through the environment that `slurm-ml devcluster env` prints (``make test``
sources it). They fail, loudly, when it is missing: a skipped integration
test is not a passing one.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


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


@pytest.fixture
def pg_dsn(admin_dsn: str) -> Iterator[str]:
    """DSN of a fresh, empty database, dropped after the test."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
