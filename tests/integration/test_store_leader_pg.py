"""PgLeaderLock against a real PostgreSQL: one leader at a time, whatever happens to it.

``pg_dsn`` (tests/conftest.py) gives each test a fresh database; advisory locks are
per database, so tests (and the dev cluster's own daemon) never contend.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from slurm_ml.store import PgLeaderLock, StoreUnavailable

pytestmark = pytest.mark.integration

KEY = 0x736C_6D6C_7465_7374  # "slmltest"

CHILD = """
import os, sys, time
from slurm_ml.store import PgLeaderLock
lock = PgLeaderLock(os.environ["LEADER_TEST_DSN"], int(sys.argv[1]), holder="child")
print(lock.try_acquire(), flush=True)
time.sleep(600)
"""


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> float:
    """Seconds until ``check()`` was true; fails after ``timeout_s``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            pytest.fail(f"not true within {timeout_s} s")
        time.sleep(0.05)
    return time.monotonic() - started


def backend_pids(dsn: str, application_name: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return [int(r[0]) for r in rows]


def terminate(dsn: str, application_name: str) -> None:
    (pid,) = backend_pids(dsn, application_name)
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    eventually(lambda: backend_pids(dsn, application_name) == [])


# One holder at a time, acquiring again, releasing: the contract suite
# (tests/store_contract.py), run over PgLeaderLock by test_store_contract_pg.py.


def test_holder_info_names_the_session_and_since_when(
    pg_locks: tuple[PgLeaderLock, PgLeaderLock],
) -> None:
    a, b = pg_locks
    assert a.try_acquire()
    seen_by_b = b.holder_info()
    assert seen_by_b is not None
    assert "application_name='slurm-ml leader test-a'" in seen_by_b and "since 20" in seen_by_b


def test_the_key_is_the_one_in_pg_locks(pg_dsn: str) -> None:
    lock = PgLeaderLock(pg_dsn, 2**64 - 3, holder="unsigned")
    same = PgLeaderLock(pg_dsn, -3, holder="signed")
    try:
        assert lock.try_acquire() and not same.try_acquire()
        with psycopg.connect(pg_dsn) as admin:
            row = admin.execute(
                "SELECT classid::bigint, objid::bigint, objsubid FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted"
            ).fetchall()
            # what a DBA would type to find the holder
            taken = admin.execute("SELECT pg_try_advisory_lock(-3)").fetchone()
        assert row == [(0xFFFF_FFFF, 0xFFFF_FFFD, 1)]
        assert taken == (False,)
    finally:
        lock.release()
        same.release()


def test_terminated_holder_is_no_longer_leader(
    pg_dsn: str, pg_locks: tuple[PgLeaderLock, PgLeaderLock]
) -> None:
    a, b = pg_locks
    assert a.try_acquire() and not b.try_acquire()
    terminate(pg_dsn, a.application_name)
    assert a.held() is False  # never raises: a lost session means "not leader"
    assert a.held() is False
    assert b.try_acquire() is True
    assert a.try_acquire() is False  # a reconnects, but b leads now
    assert "slurm-ml leader test-b" in (a.holder_info() or "")


def test_a_standby_whose_connection_died_still_acquires(
    pg_dsn: str, pg_locks: tuple[PgLeaderLock, PgLeaderLock]
) -> None:
    a, b = pg_locks
    assert a.try_acquire() and not b.try_acquire()
    terminate(pg_dsn, b.application_name)  # b's idle standby connection dies
    a.release()
    assert b.try_acquire() is True  # one fresh retry, no StoreUnavailable


def test_kill_9_of_the_holder_frees_the_lock(pg_dsn: str) -> None:
    env = {**os.environ, "LEADER_TEST_DSN": pg_dsn}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(KEY)], stdout=subprocess.PIPE, env=env, text=True
    )
    other = PgLeaderLock(pg_dsn, KEY, holder="survivor")
    try:
        assert child.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(child.stdout, selectors.EVENT_READ)
            assert sel.select(timeout=30), "child did not report"
        assert child.stdout.readline().strip() == "True"
        assert other.try_acquire() is False
        assert "slurm-ml leader child" in (other.holder_info() or "")
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
        waited = eventually(other.try_acquire, timeout_s=10)
        assert waited < 5  # the kernel closed the socket: the server frees it at once
        assert other.held()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()  # else a ResourceWarning, an error under filterwarnings
        other.release()


def test_the_session_survives_idleness_and_dies_fast_when_cut_off(pg_dsn: str) -> None:
    # The DSN's own options are kept; ours are added.
    dsn = make_conninfo(pg_dsn, options="-c search_path=custom_path")
    lock = PgLeaderLock(dsn, KEY, holder="settings")
    try:
        assert lock.try_acquire()
        conn = lock._conn  # the lock's own session (white box: settings are per session)
        assert conn is not None
        shown = {
            name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
            for name in (
                "search_path",
                "statement_timeout",
                "idle_session_timeout",
                "idle_in_transaction_session_timeout",
                "application_name",
                "TimeZone",
            )
        }
        assert shown == {
            "search_path": "custom_path",
            "statement_timeout": "2s",
            "idle_session_timeout": "0",
            "idle_in_transaction_session_timeout": "0",
            "application_name": "slurm-ml leader settings",
            "TimeZone": "UTC",
        }
        if conn.info.host.startswith("/"):  # Unix socket: no TCP keepalives to check
            return
        server = {
            name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
            for name in ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")
        }
        assert server == {
            "tcp_keepalives_idle": "10",
            "tcp_keepalives_interval": "5",
            "tcp_keepalives_count": "3",
        }
        sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
        try:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
        finally:
            sock.close()
    finally:
        lock.release()


def test_held_is_a_cheap_round_trip(pg_locks: tuple[PgLeaderLock, PgLeaderLock]) -> None:
    a, _ = pg_locks
    assert a.try_acquire()
    started = time.monotonic()
    for _ in range(50):
        assert a.held()
    assert (time.monotonic() - started) / 50 < 0.05


def test_unreachable_database_is_store_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    lock = PgLeaderLock(f"postgresql://slurmml:s3cret-pw@127.0.0.1:{port}/x", KEY)
    with pytest.raises(StoreUnavailable) as info:
        lock.try_acquire()
    assert info.value.target == f"127.0.0.1:{port}/x"
    assert "s3cret-pw" not in str(info.value)
    assert lock.held() is False
    lock.release()


def test_wrong_password_is_store_unavailable(pg_dsn: str) -> None:
    lock = PgLeaderLock(make_conninfo(pg_dsn, password="definitely-wrong-pw"), KEY)
    with pytest.raises(StoreUnavailable) as info:
        lock.try_acquire()
    assert "definitely-wrong-pw" not in str(info.value)
