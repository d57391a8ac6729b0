"""Typed errors of the store boundary.

Callers handle these, never psycopg's own exceptions: the rest of slurm-ml must
not depend on the database driver, and the split matters for behaviour —
``StoreUnavailable`` is transient (spool and retry later), the others are not.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the store raises.

    ``sqlstate`` carries PostgreSQL's five-character error code when the error
    came from the server, so callers can log it without importing psycopg.
    """

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class StoreUnavailable(StoreError):
    """The database cannot be reached or the connection was lost.

    Transient by nature: a ``SpoolingStore`` turns it into a spooled write. The
    message names ``host:port/dbname`` (``target``) and never the password.
    """

    def __init__(self, message: str, *, target: str = "", sqlstate: str | None = None) -> None:
        super().__init__(message, sqlstate=sqlstate)
        self.target = target


class InvalidDsn(StoreError):
    """The DSN itself is malformed (bad input: no connection was tried)."""


class MigrationError(StoreError):
    """A migration could not be loaded or applied, or the schema history is inconsistent."""


class StoreIntegrityError(StoreError):
    """The database refused the data itself (constraint or data error).

    Retrying the same record will fail the same way, so it must not be spooled
    forever; the spool moves such records aside.
    """


class SpoolError(StoreError):
    """The local spool file could not be written or rewritten (disk full, permissions)."""
