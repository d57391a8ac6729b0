"""``slurm-ml config check`` on the DSN slurm-ml would use: a TCP DSN that would give
its password to whatever answers at its address is warned about, by where it came
from, without the password; the exit code stays 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main

PLAIN = "postgresql://slurmml:s3cretpw@db1:5432/slurmml"
SAFE = PLAIN + "?require_auth=scram-sha-256"
#: libpq reads these for what a DSN leaves out; the developer's must not leak in
PG_VARS = dict.fromkeys(("PGHOST", "PGHOSTADDR", "PGREQUIREAUTH", "PGSSLMODE",
                         "PGCHANNELBINDING"))


def _check(config: Path | str, dsn: str | None, *extra: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["config", "check", str(config), *extra],
                             env={"SLURM_ML_DSN": dsn, **PG_VARS})
    return res.exit_code, res.stdout, res.stderr


def _with_store_dsn(tmp_path: Path, dsn: str) -> Path:
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(DEFAULT_CONFIG.read_text().replace('dsn: ""', f'dsn: "{dsn}"'))
    return path


def test_a_plain_tcp_dsn_in_the_environment_is_warned(tmp_path: Path) -> None:
    code, out, err = _check(DEFAULT_CONFIG, PLAIN)
    assert code == 0 and "OK (" in out
    assert ("slurm-ml: warning: $SLURM_ML_DSN: the DSN reaches db1:5432/slurmml over TCP "
            "without require_auth=scram-sha-256") in err
    assert "s3cretpw" not in out + err


def test_the_config_dsn_is_checked_when_the_environment_has_none(tmp_path: Path) -> None:
    code, out, err = _check(_with_store_dsn(tmp_path, PLAIN), None, "--json")
    [warning] = json.loads(out)["dsn_warnings"]
    assert code == 0 and warning.startswith("store.dsn: the DSN reaches db1:5432/slurmml")
    assert "s3cretpw" not in out + err


@pytest.mark.parametrize("dsn", [SAFE, "host=/var/run/postgresql dbname=slurmml", None])
def test_a_safe_dsn_or_none_is_not_warned(dsn: str | None) -> None:
    code, out, err = _check(DEFAULT_CONFIG, dsn, "--json")
    assert code == 0 and json.loads(out)["dsn_warnings"] == [] and "warning" not in err


def test_the_environment_wins_over_the_config_as_it_does_for_the_services(
        tmp_path: Path) -> None:
    _, out, _ = _check(_with_store_dsn(tmp_path, PLAIN), SAFE, "--json")
    assert json.loads(out)["dsn_warnings"] == []


def test_tls_without_channel_binding_is_warned() -> None:
    _, _, err = _check(DEFAULT_CONFIG, SAFE + "&sslmode=require")
    assert "without channel_binding=require" in err and "s3cretpw" not in err
