"""Connection and error plumbing shared by ``PostgresStore`` and ``migrate``.

Kept in one place so that every psycopg exception is translated the same way
and no message ever carries the password from the DSN.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from slurm_ml.store.errors import InvalidDsn, StoreError, StoreIntegrityError, StoreUnavailable

Connection = psycopg.Connection[Any]


def parse_dsn(dsn: str) -> dict[str, Any]:
    """The DSN's parameters; InvalidDsn (without echoing the DSN) if it is malformed."""
    if not isinstance(dsn, str) or not dsn.strip():
        raise InvalidDsn("PostgreSQL DSN is empty")
    try:
        return conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise InvalidDsn(f"invalid PostgreSQL DSN: {_quoted_masked(_one_line(exc), dsn)}",
                         ) from None


def _quoted_masked(text: str, dsn: str) -> str:
    """A parse error's message without what it quotes from the DSN: libpq quotes the
    offending fragment ("unexpected spaces found in \"secr et\""), which may be part of
    the password, and a DSN that did not parse has no password field to scrub. An
    unknown option's name is kept: it is a key, and the useful part."""
    text = scrub(text, dsn, {})
    if text.startswith("invalid connection option"):
        return text
    return re.sub(r'"([^"]*)"', lambda m: m[0] if m[1] == "=" else '"..."', text)


def describe_target(dsn: str) -> str:
    """``host:port/dbname`` for messages, as libpq would resolve it; never the password."""
    params = parse_dsn(dsn)
    host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    user = params.get("user") or os.environ.get("PGUSER")
    dbname = params.get("dbname") or os.environ.get("PGDATABASE") or user or "postgres"
    return f"{host}:{port}/{dbname}"


#: shorter passwords are not searched for in messages: replacing every "p" of a message
#: for a password "p" made errors unreadable, and the driver never prints a password
#: outside the DSN, which is always replaced whole
MIN_SCRUBBED = 4


def _secrets(dsn: str, params: dict[str, Any]) -> list[str]:
    found = [p for p in (str(params.get("password") or ""), os.environ.get("PGPASSWORD", ""))
             if len(p) >= MIN_SCRUBBED]
    return sorted(([dsn] if dsn else []) + found, key=len, reverse=True)


def scrub(text: str, dsn: str, params: dict[str, Any]) -> str:
    """Remove the DSN and password from a message, however the driver phrased it."""
    for secret in _secrets(dsn, params):
        text = text.replace(secret, "***")
    return text


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def connect(
    dsn: str,
    connect_timeout_s: float,
    *,
    application_name: str | None = None,
    settings: Mapping[str, str] | None = None,
    keepalives: tuple[int, int, int] = (30, 10, 3),
    tcp_user_timeout_ms: int = 0,
) -> Connection:
    """An autocommit connection with the session in UTC, or StoreUnavailable.

    TCP keepalives (``keepalives`` = idle, interval, count seconds) make a silently
    dead server show up as a lost connection instead of hanging a write forever:
    by default within about a minute. ``settings`` are server parameters for this
    session (``-c name=value``, values without spaces), added to any ``options`` the
    DSN already carries. ``tcp_user_timeout_ms`` (0: the system's) bounds how long sent
    data may stay unacknowledged before the connection counts as lost.
    """
    params = parse_dsn(dsn)
    target = describe_target(dsn)
    idle, interval, count = keepalives
    extra: dict[str, Any] = {}
    if application_name is not None:
        extra["application_name"] = application_name
    if settings:
        own = " ".join(f"-c {name}={value}" for name, value in settings.items())
        extra["options"] = f"{params.get('options') or ''} {own}".strip()
    try:
        conn = psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=max(1, round(connect_timeout_s)),
            keepalives=1,
            keepalives_idle=idle,
            keepalives_interval=interval,
            keepalives_count=count,
            tcp_user_timeout=tcp_user_timeout_ms,
            **extra,
        )
    except psycopg.Error as exc:
        reason = scrub(_one_line(exc), dsn, params)
        raise StoreUnavailable(
            f"cannot connect to PostgreSQL at {target}: {reason}",
            target=target,
            sqlstate=exc.sqlstate,
        ) from None
    try:
        conn.execute("SET TIME ZONE 'UTC'")
    except psycopg.Error as exc:
        conn.close()
        raise translate(exc, target, dsn) from None
    return conn


def translate(exc: psycopg.Error, target: str, dsn: str) -> StoreError:
    """Map a psycopg exception to the store's typed errors (nothing of psycopg escapes).

    ``dsn`` ("" when unknown) is only used to scrub secrets from the message.
    """
    reason = scrub(_one_line(exc), dsn, parse_dsn(dsn) if dsn else {})
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return StoreUnavailable(
            f"PostgreSQL at {target} is unavailable: {reason}",
            target=target,
            sqlstate=exc.sqlstate,
        )
    if isinstance(exc, psycopg.IntegrityError | psycopg.DataError):
        return StoreIntegrityError(
            f"PostgreSQL at {target} refused the data: {reason}", sqlstate=exc.sqlstate
        )
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedColumn):
        return StoreError(
            f"schema at {target} is missing or outdated (run migrations): {reason}",
            sqlstate=exc.sqlstate,
        )
    return StoreError(f"PostgreSQL error at {target}: {reason}", sqlstate=exc.sqlstate)
