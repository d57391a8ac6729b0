"""DSN handling of the PostgreSQL boundary: malformed DSNs are bad input, and messages
lose the DSN and the password but stay readable."""

from __future__ import annotations

import pytest

from slurm_ml.store import _pg
from slurm_ml.store import dsn as dsns
from slurm_ml.store.errors import InvalidDsn, LibpqTooOld


@pytest.mark.parametrize("dsn", ["", "garbage==", "host=h port"])
def test_a_malformed_dsn_is_invalid_dsn(dsn: str) -> None:
    with pytest.raises(InvalidDsn):
        _pg.parse_dsn(dsn)


def test_scrub_removes_the_dsn_and_a_real_password() -> None:
    dsn = "postgresql://slurmml:s3cretpw@db1:5432/slurmml"
    text = f"connection to {dsn} failed: password s3cretpw rejected"
    assert _pg.scrub(text, dsn, _pg.parse_dsn(dsn)) == (
        "connection to *** failed: password *** rejected")


def test_scrub_leaves_a_message_readable_for_a_one_letter_password() -> None:
    # the driver's own words, for --dsn postgresql://u:p@127.0.0.1:1/db (a CLI audit
    # found "acce***ting TCP/IP" when every "p" was replaced)
    dsn = "postgresql://u:p@127.0.0.1:1/db"
    text = ('connection to server at "127.0.0.1", port 1 failed: Connection refused '
            "Is the server running on that host and accepting TCP/IP connections?")
    assert _pg.scrub(text, dsn, _pg.parse_dsn(dsn)) == text


@pytest.mark.parametrize(("dsn", "shown"), [
    ("postgresql://u:secr et@h/db", "unexpected spaces found in \"...\""),
    ("host=h s3cretpw", "missing \"=\" after \"...\""),
    ("garbage==", 'invalid connection option "garbage"'),  # a key: kept, it helps
])
def test_a_parse_error_quotes_nothing_of_the_dsn_but_an_option_name(dsn: str,
                                                                   shown: str) -> None:
    with pytest.raises(InvalidDsn) as got:
        _pg.parse_dsn(dsn)
    assert shown in str(got.value)
    assert "secr" not in str(got.value) and "s3cretpw" not in str(got.value)


# ------------------------------------------------ the forms slurm-ml writes, and warnings

NEW_LIBPQ, OLD_LIBPQ = 180006, 150004
SCRAM = "require_auth=scram-sha-256"


def test_the_local_form_is_a_socket_without_a_password() -> None:
    params = _pg.parse_dsn(dsns.local_dsn())
    assert params == {"host": "/var/run/postgresql", "dbname": "slurmml", "user": "slurmml"}
    assert dsns.dsn_warnings(dsns.local_dsn(), environ={}, libpq=OLD_LIBPQ) == []


@pytest.mark.parametrize("dsn", [
    f"postgresql://u:pw@db1/slurmml?{SCRAM}",
    f"host=db1 dbname=slurmml {SCRAM}",
    "host=/run/pg dbname=slurmml",  # a socket: peer, no password to leak
    "dbname=slurmml",  # no host: libpq's default socket
    "postgresql://u:pw@db1/slurmml?require_auth=!password,!md5",
    f"postgresql://u:pw@db1/slurmml?{SCRAM}&sslmode=require&channel_binding=require",
])
def test_a_safe_dsn_has_no_warning(dsn: str) -> None:
    assert dsns.dsn_warnings(dsn, environ={}, libpq=NEW_LIBPQ) == []


@pytest.mark.parametrize(("dsn", "says"), [
    ("postgresql://u:s3cretpw@db1/slurmml", "without require_auth=scram-sha-256"),
    ("postgresql://u:s3cretpw@localhost/slurmml", "without require_auth=scram-sha-256"),
    ("host=/run/pg,db2 password=s3cretpw", "db2:5432/"),  # one of two hosts is TCP
    ("hostaddr=10.0.0.5 password=s3cretpw", "without require_auth"),
    ("postgresql://u:s3cretpw@db1/d?require_auth=scram-sha-256,password",
     "still allows a cleartext or MD5 password"),
    ("postgresql://u:s3cretpw@db1/d?require_auth=!password", "still allows"),  # md5 left
    (f"postgresql://u:s3cretpw@db1/d?{SCRAM}&sslmode=verify-full",
     "without channel_binding=require"),
])
def test_an_unsafe_tcp_dsn_is_warned_without_its_password(dsn: str, says: str) -> None:
    warnings = dsns.dsn_warnings(dsn, environ={}, libpq=NEW_LIBPQ)
    assert len(warnings) == 1 and says in warnings[0], warnings
    assert "s3cretpw" not in warnings[0]


def test_libpq_environment_variables_count() -> None:
    # libpq reads them for what the DSN leaves out, so the check does too
    assert dsns.dsn_warnings("dbname=slurmml", environ={"PGHOST": "db1"}, libpq=NEW_LIBPQ)
    assert dsns.dsn_warnings("host=db1", environ={"PGREQUIREAUTH": "scram-sha-256"},
                             libpq=NEW_LIBPQ) == []


def test_an_old_libpq_is_named_not_silent() -> None:
    [warning] = dsns.dsn_warnings(f"postgresql://u:s3cretpw@db1/d?{SCRAM}", environ={},
                                  libpq=OLD_LIBPQ)
    assert "libpq (15.4) is older than 16" in warning
    # libpq 15 refuses the option as unknown; the store names the real cause
    err = _pg.libpq_too_old('invalid connection option "require_auth"', OLD_LIBPQ)
    assert isinstance(err, LibpqTooOld) and isinstance(err, InvalidDsn)
    assert "needs libpq 16.0 or later" in str(err) and "libpq 15.4" in str(err)
    assert _pg.libpq_too_old('invalid connection option "require_auth"', NEW_LIBPQ) is None
    assert _pg.libpq_too_old('invalid connection option "garbage"', OLD_LIBPQ) is None


def test_the_libpq_here_knows_require_auth() -> None:
    # what the dev cluster's and compose's DSNs need; psycopg[binary] bundles its libpq
    assert dsns.libpq_version() >= dsns.LIBPQ_REQUIRE_AUTH


def test_services_log_an_unsafe_dsn_once_at_start(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from slurm_ml.store.dsn import log_unsafe, tcp_dsn

    log = logging.getLogger("slurm_ml.test")
    with caplog.at_level(logging.WARNING, logger="slurm_ml.test"):
        log_unsafe("postgresql://u:pw-not-logged@db.example:5432/x", log, "daemon")
        log_unsafe(tcp_dsn("db.example", 5432, "x", "u", "pw-not-logged"), log, "daemon")
        log_unsafe("postgresql://[bad", log, "submitd")  # unparsable: the connection says so
    assert len(caplog.records) == 1
    text = caplog.records[0].getMessage()
    assert "event=unsafe_dsn service=daemon" in text and "require_auth" in text
    assert "pw-not-logged" not in text
