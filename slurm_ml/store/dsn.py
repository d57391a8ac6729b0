"""The DSN forms slurm-ml writes, and what ``config check`` says about a DSN.

libpq answers whatever authentication the server at the DSN's address asks for: a
server that asks for a cleartext password gets the password, one that asks for MD5 gets
a hash that logs in as well as the password does. While PostgreSQL is down, anyone
who can listen on its address (any user, on a port above 1024) is such a server. Two
forms hand it nothing it can log in with:

* **a Unix socket with peer authentication**, where PostgreSQL runs on the same host
  (:func:`local_dsn`): no password exists, the kernel tells the server who connects,
  and the socket's directory is writable by postgres alone;
* **over TCP, ``require_auth=scram-sha-256``** (:func:`tcp_dsn`): libpq refuses every
  other method before it answers. SCRAM never sends the password, only a proof that a
  fake server could use to guess it offline, which a long random password defeats.
  With TLS on (sslmode ``require`` or ``verify-*``), ``channel_binding=require`` also
  ties that proof to the server's TLS certificate, so a man in the middle cannot relay it.

``require_auth`` needs libpq 16 or later (``psycopg.pq.version()``): an older libpq
refuses such a DSN, which the store reports as :class:`~slurm_ml.store.errors.LibpqTooOld`,
and cannot protect a DSN without it, which :func:`dsn_warnings` says.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from urllib.parse import quote

import psycopg

from slurm_ml.store import _pg

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_ROLE",
    "LIBPQ_REQUIRE_AUTH",
    "LOCAL_SOCKET_DIR",
    "SAFE_AUTH",
    "dsn_warnings",
    "is_tcp",
    "libpq_version",
    "local_dsn",
    "log_unsafe",
    "tcp_dsn",
]

#: the first libpq (PQlibVersion) that knows ``require_auth``
LIBPQ_REQUIRE_AUTH = _pg.LIBPQ_REQUIRE_AUTH
#: where Debian's PostgreSQL puts its socket (``unix_socket_directories``)
LOCAL_SOCKET_DIR = "/var/run/postgresql"
#: the role and database docs/admin.md creates
DEFAULT_DB = DEFAULT_ROLE = "slurmml"
#: the one method a TCP DSN allows
SAFE_AUTH = "scram-sha-256"
#: sslmodes under which the connection is always TLS (``prefer`` may fall back to none)
TLS_MODES = frozenset({"require", "verify-ca", "verify-full"})
#: methods that hand the server the password (``password``) or a hash that logs in (``md5``)
_LEAKING = frozenset({"password", "md5"})
_METHODS = frozenset({"password", "md5", "gss", "sspi", "scram-sha-256", "none"})


def libpq_version() -> int:
    """The version of the libpq psycopg links (``180006`` is 18.6), not the one it was
    built against: that is the one whose options a DSN may use."""
    return psycopg.pq.version()


def local_dsn(dbname: str = DEFAULT_DB, user: str = DEFAULT_ROLE,
              socket_dir: str = LOCAL_SOCKET_DIR, port: int | None = None) -> str:
    """The DSN of a PostgreSQL on this host, over its Unix socket: with peer
    authentication no password is needed, so none can leak. ``user`` is the role;
    an OS user of another name logs in as it through a pg_ident.conf map."""
    parts = {"host": socket_dir, "port": None if port is None else str(port),
             "dbname": dbname, "user": user}
    return psycopg.conninfo.make_conninfo("", **{k: v for k, v in parts.items() if v})


def tcp_dsn(host: str, port: int, dbname: str, user: str, password: str, *,
            sslmode: str | None = None) -> str:
    """A password DSN over TCP that gives the password to no server that asks for it
    in clear or as MD5 (``require_auth=scram-sha-256``), with ``channel_binding=require``
    where ``sslmode`` makes the connection TLS."""
    where = f"[{host}]" if ":" in host else host
    query = [f"require_auth={SAFE_AUTH}"]
    if sslmode:
        query.append(f"sslmode={quote(sslmode, safe='')}")
        if sslmode in TLS_MODES:
            query.append("channel_binding=require")
    return (f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@{where}:{port}/"
            f"{quote(dbname, safe='')}?{'&'.join(query)}")


def is_tcp(params: Mapping[str, str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether libpq would connect over TCP to any of the DSN's hosts: a ``hostaddr``, or
    a ``host`` that is not a socket directory (``/...``, or ``@`` for Linux's abstract
    namespace); without a host, ``$PGHOSTADDR`` and ``$PGHOST``, then libpq's default
    socket."""
    env = os.environ if environ is None else environ
    if params.get("hostaddr") or env.get("PGHOSTADDR"):
        return True
    hosts = params.get("host") or env.get("PGHOST", "")
    return any(h.strip() and not h.strip().startswith(("/", "@")) for h in hosts.split(","))


def _leaks(require_auth: str) -> bool:
    """Whether a ``require_auth`` value still lets libpq answer a cleartext or MD5
    request (``!`` negates each listed method; an unknown name, libpq refuses)."""
    listed = {m.strip().lower() for m in require_auth.split(",") if m.strip()}
    if not listed:
        return True
    if all(m.startswith("!") for m in listed):
        allowed = _METHODS - {m[1:] for m in listed}
    else:
        allowed = frozenset(listed)
    return bool(allowed & _LEAKING)


def dsn_warnings(dsn: str, *, environ: Mapping[str, str] | None = None,
                 libpq: int | None = None) -> list[str]:
    """What is unsafe about ``dsn`` (see the module doc); [] for a safe one. Messages
    name ``host:port/dbname`` and option names, never the password.
    :class:`~slurm_ml.store.errors.InvalidDsn` for a DSN that does not parse."""
    env = os.environ if environ is None else environ
    params = _pg.parse_dsn(dsn)
    if not is_tcp(params, env):
        return []
    target = _pg.describe_target(dsn)
    version = libpq_version() if libpq is None else libpq
    out = []
    require_auth = params.get("require_auth") or env.get("PGREQUIREAUTH", "")
    if version < LIBPQ_REQUIRE_AUTH:
        out.append(
            f"the DSN reaches {target} over TCP, and this libpq ({_pg.version_text(version)}) "
            f"is older than 16: it cannot refuse to send the password to a server that "
            f"asks for it in clear or as MD5 (require_auth needs libpq 16 or later). Use "
            f"a psycopg with a newer libpq, or a Unix socket with peer authentication")
    elif not require_auth:
        out.append(
            f"the DSN reaches {target} over TCP without require_auth={SAFE_AUTH}: libpq "
            f"sends the password in clear (or as MD5) to whatever answers at that address "
            f"and asks for it, such as another user's program listening there while "
            f"PostgreSQL is down. Add require_auth={SAFE_AUTH} (PostgreSQL's pg_hba.conf "
            f"must use scram-sha-256), or use a Unix socket with peer authentication")
    elif _leaks(require_auth):
        out.append(
            f"the DSN reaches {target} over TCP and its require_auth still allows a "
            f"cleartext or MD5 password: set require_auth={SAFE_AUTH}")
    sslmode = params.get("sslmode") or env.get("PGSSLMODE", "")
    binding = params.get("channel_binding") or env.get("PGCHANNELBINDING", "")
    if sslmode in TLS_MODES and binding != "require":
        out.append(
            f"the DSN reaches {target} over TLS (sslmode={sslmode}) without "
            f"channel_binding=require, which ties the SCRAM login to this TLS connection so "
            f"that a server in the middle cannot relay it. Add channel_binding=require")
    return out


def log_unsafe(dsn: str, log: logging.Logger, service: str) -> None:
    """Log what :func:`dsn_warnings` finds, once, as a long-running ``service`` starts:
    ``config check`` says it before deployment, and this says it where the service's
    operator looks. A DSN that does not parse is left to the connection to report."""
    from slurm_ml.store.errors import InvalidDsn

    try:
        warnings = dsn_warnings(dsn)
    except InvalidDsn:
        return
    for text in warnings:
        log.warning("event=unsafe_dsn service=%s %s", service, text)
