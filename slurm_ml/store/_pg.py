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

from slurm_ml.store.errors import (
    AuthMethodRefused,
    InvalidDsn,
    LibpqTooOld,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
)

Connection = psycopg.Connection[Any]

#: the first libpq (PQlibVersion) that knows ``require_auth``
LIBPQ_REQUIRE_AUTH = 160000
#: options a libpq older than the version named refuses as unknown
_OPTION_SINCE = {"require_auth": LIBPQ_REQUIRE_AUTH, "channel_binding": 130000}


def version_text(version: int) -> str:
    """``150004`` → ``15.4`` (PQlibVersion's numbering since PostgreSQL 10)."""
    return f"{version // 10000}.{version % 10000}"


def libpq_too_old(message: str, version: int) -> LibpqTooOld | None:
    """The named error for a DSN this libpq refuses only for its age: libpq says
    ``invalid connection option "require_auth"``, which reads like a typo in the DSN."""
    for option, since in _OPTION_SINCE.items():
        if version < since and f'invalid connection option "{option}"' in message:
            return LibpqTooOld(
                f"the PostgreSQL DSN uses {option}, which needs libpq "
                f"{version_text(since)} or later, and psycopg here uses libpq "
                f"{version_text(version)}: install a psycopg whose libpq is newer "
                f"(python -c 'import psycopg; print(psycopg.pq.version())' shows it). "
                f"Removing {option} instead would let a server that asks for the "
                f"password in clear or as MD5 have it")
    return None


def parse_dsn(dsn: str) -> dict[str, Any]:
    """The DSN's parameters; InvalidDsn (without echoing the DSN) if it is malformed,
    LibpqTooOld if only this libpq's age refuses it."""
    if not isinstance(dsn, str) or not dsn.strip():
        raise InvalidDsn("PostgreSQL DSN is empty")
    try:
        return conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        text = _one_line(exc)
        old = libpq_too_old(text, psycopg.pq.version())
        if old is not None:
            raise old from None
        raise InvalidDsn(f"invalid PostgreSQL DSN: {_quoted_masked(text, dsn)}",
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


#: libpq's words (fe-auth.c) when the server's authentication is not what the DSN's
#: require_auth or channel_binding demand: libpq stops before it answers with a password
#: (not "channel binding required, but SSL not in use": that is the DSN's own sslmode)
_REFUSED_AUTH = ("authentication method requirement", "channel binding is required",
                 "channel binding required but", "channel binding required, but server")


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
        if any(mark in reason for mark in _REFUSED_AUTH):
            raise AuthMethodRefused(
                f"refused to log in to PostgreSQL at {target}: {reason}. The server's "
                f"authentication is not what the DSN requires (require_auth, "
                f"channel_binding), so libpq sent it no password: either something else "
                f"answers at that address, or PostgreSQL's pg_hba.conf does not use "
                f"scram-sha-256 there",
                target=target,
                sqlstate=exc.sqlstate,
            ) from None
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
