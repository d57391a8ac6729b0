"""Leader election for the reconciler daemon: a PostgreSQL session advisory lock.

Only the daemon that holds the lock acts. The lock lives exactly as long as the
session that took it: when the holder exits, is killed (even ``kill -9``), is
terminated by an operator or drops off the network, the server ends the session,
frees the lock, and another daemon's ``try_acquire`` gets it.

Why two daemons never both act: the holder asks ``held()`` before it acts, and
``held()`` asks the server, so a holder whose session is gone knows it is no longer
leader. A holder cut off from the network cannot ask, and cannot write the
audit-log intent that precedes every action either (same database), so it does not
act; meanwhile the server's TCP keepalives (set per session here) declare the
session dead within about 25 s and free the lock for a standby.

The lock needs a real session: not through a transaction-pooling proxy (pgbouncer
in transaction mode would hand the lock to whichever client shares the backend).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, LiteralString, Protocol, TypeVar, runtime_checkable

import psycopg
from psycopg.rows import dict_row

from slurm_ml.store import _pg
from slurm_ml.store.errors import StoreUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")

_U64 = 2**64
_I64_MAX = 2**63 - 1

#: Client side: probe an idle connection after 10 s, every 5 s, give up after 3 misses.
_KEEPALIVES = (10, 5, 3)
#: Sent data unacknowledged this long (ms) means the connection is lost (both sides).
_TCP_USER_TIMEOUT_MS = 25_000
#: Server side of the same, so a half-dead leader's session (and lock) ends in ~25 s.
#: ``statement_timeout`` keeps ``held()`` short; the idle timeouts must never end the
#: session (that would silently drop leadership), whatever the server's defaults are.
_SESSION_SETTINGS = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": str(_TCP_USER_TIMEOUT_MS),
    "statement_timeout": "2000",
    "idle_session_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
}
_APP_NAME_MAX = 63  # PostgreSQL's NAMEDATALEN - 1: longer names are truncated by the server

_TRY_LOCK: LiteralString = "SELECT pg_try_advisory_lock(%(key)s::bigint)"
_UNLOCK: LiteralString = "SELECT pg_advisory_unlock(%(key)s::bigint)"

# pg_locks shows a bigint advisory key as classid (high 32 bits), objid (low 32 bits)
# and objsubid 1. Advisory locks are per database.
_HELD: LiteralString = """
SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 1
      AND classid::bigint = %(classid)s AND objid::bigint = %(objid)s
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND pid = pg_backend_pid()
)
"""
_HOLDER: LiteralString = """
SELECT l.pid, l.pid = pg_backend_pid() AS ours, a.application_name, a.usename,
       host(a.client_addr) AS client_addr, a.client_port, a.backend_start
FROM pg_locks AS l
LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid::bigint = %(classid)s AND l.objid::bigint = %(objid)s
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY l.pid
LIMIT 1
"""


def signed_lock_key(key: int) -> int:
    """The ``bigint`` for ``pg_advisory_lock``: unsigned values of 2**63 and up wrap
    to negative (two's complement), so any 64-bit config value names one lock."""
    if isinstance(key, bool) or not isinstance(key, int):
        raise TypeError(f"lock key must be an int, got {type(key).__name__}")
    if not -(2**63) <= key < _U64:
        raise ValueError(f"lock key must fit in 64 bits, got {key}")
    return key - _U64 if key > _I64_MAX else key


def _lock_ids(key: int) -> dict[str, int]:
    unsigned = key % _U64
    return {"classid": unsigned >> 32, "objid": unsigned & 0xFFFF_FFFF}


def application_name(holder: str) -> str:
    """``slurm-ml leader <holder>`` as the server will show it: printable ASCII, 63 chars."""
    name = "slurm-ml leader " + (holder or f"{socket.gethostname()}:{os.getpid()}")
    return "".join(c if " " <= c <= "~" else "?" for c in name)[:_APP_NAME_MAX]


@runtime_checkable
class LeaderLock(Protocol):
    """Leadership of one key: at most one holder at a time, across hosts."""

    def try_acquire(self) -> bool:
        """Non-blocking; True if we hold the lock (already, or now).

        Raises StoreUnavailable when the database cannot be reached.
        """
        ...

    def held(self) -> bool:
        """Re-verifies with the server; False once our session is lost. Never raises."""
        ...

    def release(self) -> None:
        """Give the lock up (idempotent, never raises); ``try_acquire`` may take it again."""
        ...

    def holder_info(self) -> str | None:
        """Who holds the key, for logs and status (None: nobody). StoreError if unreadable."""
        ...


def _describe(row: dict[str, Any]) -> str:
    start = row.get("backend_start")
    since = start.isoformat(timespec="seconds") if isinstance(start, datetime) else "?"
    addr = row.get("client_addr")
    where = f"{addr}:{row.get('client_port')}" if addr else "local socket"
    ours = " (this session)" if row.get("ours") else ""
    return (
        f"pid {row['pid']}{ours} application_name={row.get('application_name') or '?'!r} "
        f"user={row.get('usename') or '?'} from {where} since {since}"
    )


class PgLeaderLock:
    """``LeaderLock`` on a dedicated autocommit connection (see the module doc).

    The connection opens in ``try_acquire``, not here, so a daemon can start while
    the database is down. Thread-safe: one mutex around the connection.
    """

    def __init__(
        self, dsn: str, key: int, *, connect_timeout_s: float = 5, holder: str = ""
    ) -> None:
        if connect_timeout_s <= 0:
            raise ValueError("connect_timeout_s must be positive")
        self.key = signed_lock_key(key)
        self.application_name = application_name(holder)
        self._target = _pg.describe_target(dsn)  # also validates the DSN
        self._dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._conn: _pg.Connection | None = None
        self._held = False
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"PgLeaderLock({self._target}, key={self.key})"

    @property
    def target(self) -> str:
        """``host:port/dbname`` of the lock's database (safe to log)."""
        return self._target

    def _connect(self) -> _pg.Connection:
        return _pg.connect(
            self._dsn,
            self._connect_timeout_s,
            application_name=self.application_name,
            settings=_SESSION_SETTINGS,
            keepalives=_KEEPALIVES,
            tcp_user_timeout_ms=_TCP_USER_TIMEOUT_MS,
        )

    def _drop(self) -> None:
        """Close our session: the server frees any lock it held."""
        conn, self._conn = self._conn, None
        self._held = False
        if conn is not None:
            with contextlib.suppress(Exception):  # already broken: nothing left to free
                conn.close()

    def _run(self, op: Callable[[_pg.Connection], T]) -> T:
        """``op`` on our connection (opened if need be), once more on a fresh one if a
        kept one had died. Any failure drops the session: a lock it held is freed."""
        for attempt in range(2):
            fresh = self._conn is None
            if self._conn is None:
                self._conn = self._connect()
            try:
                return op(self._conn)
            except psycopg.Error as exc:
                self._drop()
                lost = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
                if lost and not fresh and attempt == 0:
                    continue  # e.g. a standby's idle connection died: one fresh try
                raise _pg.translate(exc, self._target, self._dsn) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def try_acquire(self) -> bool:
        with self._mutex:
            if self._held and self._verify():
                return True
            row = self._run(lambda conn: conn.execute(_TRY_LOCK, {"key": self.key}).fetchone())
            got = self._held = bool(row and row[0])
        if got:
            logger.info(
                "event=leader_acquired key=%d target=%s application_name=%r",
                self.key,
                self._target,
                self.application_name,
            )
        return got

    def held(self) -> bool:
        with self._mutex:
            return self._held and self._verify()

    def _verify(self) -> bool:
        """Ask the server whether our backend holds the key; on any doubt, drop it."""
        conn = self._conn
        if conn is None:
            self._held = False
            return False
        try:
            row = conn.execute(_HELD, _lock_ids(self.key)).fetchone()
        except Exception as exc:  # any failure means we cannot know: we are not leader
            logger.warning(
                "event=leader_lost key=%d target=%s error=%r",
                self.key,
                self._target,
                " ".join(str(exc).split()),
            )
            self._drop()
            return False
        if not (row and row[0]):
            logger.warning(
                "event=leader_lost key=%d target=%s error=lock_gone", self.key, self._target
            )
            self._drop()
            return False
        return True

    def release(self) -> None:
        with self._mutex:
            was_held, conn = self._held, self._conn
            if was_held and conn is not None:
                # Unlock before closing, so that the lock is free when release() returns
                # (a close alone frees it only once the server has reaped the backend).
                with contextlib.suppress(Exception):
                    conn.execute(_UNLOCK, {"key": self.key})
            self._drop()
        if was_held:
            logger.info("event=leader_released key=%d target=%s", self.key, self._target)

    def holder_info(self) -> str | None:
        def op(conn: _pg.Connection) -> dict[str, Any] | None:
            with conn.cursor(row_factory=dict_row) as cur:
                return cur.execute(_HOLDER, _lock_ids(self.key)).fetchone()

        with self._mutex:
            row = self._run(op)
        return None if row is None else _describe(row)


# --------------------------------------------------------------------------- fake


class FakeLockTable:
    """The server side of ``FakeLeaderLock``s: which session holds which key.

    Locks sharing one table contend like sessions on one database.
    ``set_available(False)`` is a database outage (every session ends, every lock
    is freed, ``try_acquire`` raises StoreUnavailable); ``reap()`` is the server
    noticing sessions that a ``lose(freed=False)`` left half-dead.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._available = True
        self._live: set[object] = set()  # open sessions
        self._holders: dict[int, tuple[object, str]] = {}  # key -> (session, app name)

    def set_available(self, available: bool) -> None:
        with self._mutex:
            self._available = available
            if not available:
                self._live.clear()
                self._holders.clear()

    def reap(self) -> None:
        """Free the locks of sessions that are gone (the server's keepalives firing)."""
        with self._mutex:
            self._holders = {k: v for k, v in self._holders.items() if v[0] in self._live}

    def holder(self, key: int) -> str | None:
        """The application name holding ``key`` (None: nobody); works while 'down'."""
        with self._mutex:
            entry = self._holders.get(signed_lock_key(key))
        return None if entry is None else entry[1]


class FakeLeaderLock:
    """A stateful ``LeaderLock`` for tests; instances on one ``FakeLockTable`` contend."""

    def __init__(self, table: FakeLockTable, key: int, *, holder: str = "") -> None:
        self.table = table
        self.key = signed_lock_key(key)
        self.application_name = application_name(holder or f"fake-{id(self):x}")
        self._session: object | None = None

    def __repr__(self) -> str:
        return f"FakeLeaderLock(key={self.key}, {self.application_name!r})"

    def _down(self) -> StoreUnavailable:
        return StoreUnavailable(
            "cannot connect to PostgreSQL at fake:0/fake: simulated outage", target="fake:0/fake"
        )

    def try_acquire(self) -> bool:
        t = self.table
        with t._mutex:
            if not t._available:
                raise self._down()
            if self._session not in t._live:
                self._session = object()  # a new session, as PgLeaderLock reconnects
                t._live.add(self._session)
            entry = t._holders.setdefault(self.key, (self._session, self.application_name))
            return entry[0] is self._session

    def held(self) -> bool:
        t = self.table
        with t._mutex:
            if not t._available or self._session not in t._live:
                return False
            entry = t._holders.get(self.key)
            return entry is not None and entry[0] is self._session

    def release(self) -> None:
        self._end_session(freed=True)

    def lose(self, *, freed: bool = True) -> None:
        """Our session drops: ``held()`` turns False at once. With ``freed=False`` the
        server has not noticed yet and keeps the lock until ``table.reap()``."""
        self._end_session(freed=freed)

    def _end_session(self, *, freed: bool) -> None:
        t = self.table
        with t._mutex:
            session, self._session = self._session, None
            if session is None:
                return
            t._live.discard(session)
            if freed:
                t._holders = {k: v for k, v in t._holders.items() if v[0] is not session}

    def holder_info(self) -> str | None:
        t = self.table
        with t._mutex:
            if not t._available:
                raise self._down()
            entry = t._holders.get(self.key)
            if entry is None:
                return None
            ours = " (this session)" if entry[0] is self._session else ""
            return f"fake session{ours} application_name={entry[1]!r}"
