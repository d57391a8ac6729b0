"""Schema migrations: plain SQL files applied in order, each in its own transaction.

Files are ``migrations/NNNN_name.sql``; the version is the file stem. Applied
versions and a checksum of their SQL live in ``schema_migrations``. Every step
takes a transaction-scoped advisory lock, re-reads what is applied and applies
the next pending migration, so two migrators racing (two daemons starting at
once) apply each migration exactly once and neither fails. A migration must not
contain BEGIN/COMMIT or statements that cannot run in a transaction
(e.g. CREATE INDEX CONCURRENTLY).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import LiteralString

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from slurm_ml.store import _pg
from slurm_ml.store.errors import MigrationError

logger = logging.getLogger(__name__)

#: pg_advisory_xact_lock key serialising migrators ("slmlmigr"); other locks use other keys.
MIGRATION_LOCK_KEY = 0x736C_6D6C_6D69_6772

_VERSION_RE = re.compile(r"^[0-9]{4}_[a-z0-9_]+$")

_LOCK: LiteralString = "SELECT pg_advisory_xact_lock(%(key)s)"
_TRY_LOCK: LiteralString = "SELECT pg_try_advisory_xact_lock(%(key)s)"
_CREATE_HISTORY: LiteralString = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
_SELECT_HISTORY: LiteralString = "SELECT version, checksum FROM schema_migrations"
_INSERT_HISTORY: LiteralString = (
    "INSERT INTO schema_migrations (version, checksum) VALUES (%(version)s, %(checksum)s)"
)


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: ``version`` is its stem (``0001_init``), ``sql`` its text."""

    version: str
    sql: str

    @property
    def checksum(self) -> str:
        """Detects an already-applied migration whose file was edited afterwards."""
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def load_migrations(directory: Path | Traversable | None = None) -> list[Migration]:
    """The ``*.sql`` migrations of ``directory`` (default: the packaged ones), in order."""
    root = directory if directory is not None else resources.files(__package__) / "migrations"
    found: list[Migration] = []
    for entry in root.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        version = entry.name[: -len(".sql")]
        if not _VERSION_RE.match(version):
            raise MigrationError(f"migration file {entry.name!r} is not named NNNN_name.sql")
        found.append(Migration(version, entry.read_text(encoding="utf-8")))
    return _ordered(found)


def _ordered(migrations: Sequence[Migration]) -> list[Migration]:
    ordered = sorted(migrations, key=lambda m: m.version)
    numbers = [m.version[:4] for m in ordered]
    if len(set(numbers)) != len(numbers):
        raise MigrationError(f"duplicate migration numbers in {[m.version for m in ordered]}")
    return ordered


def migrate(
    conn_or_dsn: str | _pg.Connection,
    *,
    migrations: Sequence[Migration] | None = None,
    connect_timeout_s: float = 5,
    say: Callable[[str], None] | None = None,
) -> list[str]:
    """Apply pending migrations; return the versions applied by this call (``[]`` if none).

    Given a DSN it opens and closes its own connection; given a connection it
    must be idle (no transaction open) and is left as it was found.
    Raises StoreUnavailable if the database cannot be reached and
    MigrationError if a migration fails (that migration is rolled back, earlier
    ones stay applied) or the recorded history does not match the files. ``say`` hears
    progress: a wait for another migrator's lock, and each migration as it starts.
    """
    plan = load_migrations() if migrations is None else _ordered(migrations)
    if isinstance(conn_or_dsn, str):
        dsn = conn_or_dsn
        target = _pg.describe_target(dsn)
        conn = _pg.connect(dsn, connect_timeout_s)
        try:
            return _migrate(conn, plan, target, dsn, say)
        finally:
            conn.close()
    conn = conn_or_dsn
    target = f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise MigrationError("migrate() needs an idle connection (commit or roll back first)")
    autocommit = conn.autocommit
    try:
        conn.autocommit = True
        return _migrate(conn, plan, target, "", say)
    except psycopg.Error as exc:
        raise _pg.translate(exc, target, "") from exc
    finally:
        if not conn.closed and conn.autocommit != autocommit:
            try:
                conn.autocommit = autocommit
            except psycopg.Error:
                logger.warning("event=migrate_restore_failed target=%s", target)


def _try_lock(conn: _pg.Connection) -> bool:
    """Take the migration lock if it is free now (then ``_LOCK`` returns at once, the
    lock being re-entrant within the transaction)."""
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(_TRY_LOCK, {"key": MIGRATION_LOCK_KEY}).fetchone()
    return bool(row and row[0])


def _migrate(
    conn: _pg.Connection,
    plan: list[Migration],
    target: str,
    dsn: str,
    say: Callable[[str], None] | None = None,
) -> list[str]:
    applied_now: list[str] = []
    known = {m.version: m for m in plan}
    while True:
        try:
            with conn.transaction():
                if say is not None and not _try_lock(conn):
                    say(f"waiting for another migrator's lock at {target} ...")
                conn.execute(_LOCK, {"key": MIGRATION_LOCK_KEY})
                conn.execute(_CREATE_HISTORY)
                with conn.cursor(row_factory=tuple_row) as cur:
                    history = {str(v): str(c) for v, c in cur.execute(_SELECT_HISTORY)}
                _check_history(history, known, target)
                pending = [m for m in plan if m.version not in history]
                if not pending:
                    break
                step = pending[0]
                if say is not None:
                    say(f"applying {step.version} ...")
                try:
                    conn.execute(step.sql.encode("utf-8"))
                except psycopg.Error as exc:
                    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
                        raise
                    raise MigrationError(
                        f"migration {step.version} failed at {target} and was rolled back: "
                        f"{' '.join(str(exc).split())}",
                        sqlstate=exc.sqlstate,
                    ) from exc
                conn.execute(_INSERT_HISTORY, {"version": step.version, "checksum": step.checksum})
        except psycopg.Error as exc:
            raise _pg.translate(exc, target, dsn) from exc
        applied_now.append(step.version)
        logger.info("event=migration_applied version=%s target=%s", step.version, target)
    return applied_now


def _check_history(history: dict[str, str], known: dict[str, Migration], target: str) -> None:
    unknown = sorted(set(history) - set(known))
    if unknown:
        raise MigrationError(
            f"database at {target} has migrations this slurm-ml does not know: {unknown} "
            "(it was migrated by a newer version)"
        )
    for version, checksum in history.items():
        if known[version].checksum != checksum:
            raise MigrationError(
                f"migration {version} was edited after it was applied at {target} "
                "(checksum differs); add a new migration instead"
            )
