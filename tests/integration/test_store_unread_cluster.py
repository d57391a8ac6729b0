"""On the real dev cluster and PostgreSQL: ``why``, ``budget status`` and ``quarantine
list`` pointed at a database that does not answer (a closed port; the shared PostgreSQL
keeps running) say on stdout that what the database holds is unknown, give null in
--json and exit 1; and the DSN form slurm-ml writes logs in to the real server with
SCRAM, while a stricter require_auth than the server's is refused by name."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo
from slurm_jobs import SLURM_ML, sbatch, wait_state

from slurm_ml import proc
from slurm_ml.store.dsn import dsn_warnings
from slurm_ml.store.errors import AuthMethodRefused
from slurm_ml.store.postgres import PostgresStore

pytestmark = pytest.mark.integration

NOTHING_HAPPENED = "No requeue, cancel or warning by slurm-ml."


def closed_port() -> int:
    """A local port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def unreachable(admin_dsn: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a CLI whose DSN names a closed port (and a spool of its own)."""
    dsn = make_conninfo(admin_dsn, host="127.0.0.1", port=str(closed_port()),
                        require_auth="scram-sha-256")
    return {**os.environ, "SLURM_ML_DSN": dsn, "SLURM_ML_SPOOL_DIR": str(tmp_path / "spool")}


def _cli(env: dict[str, str], *args: str) -> proc.Result:
    return proc.run([SLURM_ML, *args], env=env, check=False, timeout_s=120)


def test_why_of_a_listed_job_with_the_database_unreachable(
        unreachable: dict[str, str], jobs: list[int]) -> None:
    job = sbatch("alice", "--hold", "--wrap", "true", jobs=jobs)  # held: takes nothing
    wait_state(job, {"PENDING"})

    text = _cli(unreachable, "why", str(job))
    data = _cli(unreachable, "why", str(job), "--json")

    assert text.returncode == 1, text.stderr
    assert f"Job {job}: PENDING" in text.stdout  # Slurm's part is still there
    assert "History unknown: the database could not be read" in text.stdout
    assert NOTHING_HAPPENED not in text.stdout
    assert "Connection refused" in text.stdout
    doc = json.loads(data.stdout)
    assert data.returncode == 1 and doc["found"] is True
    assert doc["history"] is None and "cannot connect" in doc["store_error"]


def test_budget_status_with_the_database_unreachable(unreachable: dict[str, str]) -> None:
    text = _cli(unreachable, "budget", "status")
    data = _cli(unreachable, "budget", "status", "--json")

    assert text.returncode == 1, text.stderr
    assert "Database not read (cannot connect to PostgreSQL" in text.stdout
    doc = json.loads(data.stdout)
    assert data.returncode == 1 and doc["nodes"] and doc["refunds"] is None
    assert doc["store_error"]


def test_quarantine_list_with_the_database_unreachable(unreachable: dict[str, str]) -> None:
    text = _cli(unreachable, "quarantine", "list")
    data = _cli(unreachable, "quarantine", "list", "--json")

    assert text.returncode == 1, text.stderr
    assert "no breaker alarms" not in text.stdout
    assert "breaker alarms" in text.stdout and "unknown (the database could not be read" \
        in text.stdout
    doc = json.loads(data.stdout)
    assert data.returncode == 1 and doc["alarms"] is None and doc["store_error"]


def test_the_scram_only_form_logs_in_to_the_real_server(admin_dsn: str) -> None:
    dsn = make_conninfo(admin_dsn, require_auth="scram-sha-256")
    assert dsn_warnings(dsn) == []
    with PostgresStore(dsn, connect_timeout_s=5) as store:
        store.audit_entries()  # a read: connected, logged in by SCRAM


def test_a_server_that_asks_for_another_method_is_refused_by_name(admin_dsn: str) -> None:
    # the real server asks for SCRAM; a DSN that allows only cleartext refuses it, the
    # way the slurm-ml form refuses a cleartext request
    dsn = make_conninfo(admin_dsn, require_auth="password")
    with PostgresStore(dsn, connect_timeout_s=5) as store, \
            pytest.raises(AuthMethodRefused) as got:
        store.audit_entries()
    assert "authentication method requirement" in str(got.value)
