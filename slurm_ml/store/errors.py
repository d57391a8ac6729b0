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


class AuthMethodRefused(StoreUnavailable):
    """libpq refused the authentication the server asked for, as the DSN's
    ``require_auth`` or ``channel_binding`` told it to, and sent no password.

    Transient as far as the spool is concerned (the real server may answer next time),
    but worth naming: it is either something else answering at PostgreSQL's address or
    a pg_hba.conf that does not use scram-sha-256.
    """


class InvalidDsn(StoreError):
    """The DSN itself is malformed (bad input: no connection was tried)."""


class LibpqTooOld(InvalidDsn):
    """The DSN uses an option the libpq psycopg links is too old for (``require_auth``
    needs libpq 16): not a typo in the DSN, a driver to upgrade."""


class MigrationError(StoreError):
    """A migration could not be loaded or applied, or the schema history is inconsistent."""


class StoreIntegrityError(StoreError):
    """The database refused the data itself (constraint or data error).

    Retrying the same record will fail the same way, so it must not be spooled
    forever; the spool moves such records aside.
    """


class SpoolError(StoreError):
    """The local spool file could not be written or rewritten (disk full, permissions)."""
