"""DSN handling of the PostgreSQL boundary: malformed DSNs are bad input, and messages
lose the DSN and the password but stay readable."""

from __future__ import annotations

import pytest

from slurm_ml.store import _pg
from slurm_ml.store.errors import InvalidDsn


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
