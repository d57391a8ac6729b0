"""`slurm-ml install` / `uninstall` through click: exit codes, --json shape, --dry-run
--diff with no Slurm reachable, and the systemd units checked by systemd-analyze."""

from __future__ import annotations

import configparser
import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from deploy_helpers import CONFIG, cfg, make_conf_dir, params, snapshot

from slurm_ml import proc
from slurm_ml.cli import main
from slurm_ml.deploy import state
from slurm_ml.deploy.bundle import render_files


def _run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args), env={"SLURM_ML_DSN": ""})
    return res.exit_code, res.stdout, res.stderr


def _install(tmp: Path, etc: Path, *extra: str) -> tuple[int, str, str]:
    return _run("install", "--config", str(CONFIG), "--slurm-conf-dir", str(etc),
                "--systemd-dir", str(tmp / "systemd"), *extra)


def test_help_documents_the_exit_codes() -> None:
    for cmd in ("install", "uninstall"):
        code, out, _ = _run(cmd, "--help")
        assert code == 0
        assert "1  refused" in out and "4  a file could not be read or written" in out
        assert ("3  Slurm unreachable" in out) == (cmd == "install")


def test_a_write_that_fails_midway_exits_4_and_a_rerun_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from slurm_ml.deploy import apply

    etc = make_conf_dir(tmp_path)
    real, done = apply._apply_one, []

    def disk_fills(a: apply.Action) -> None:
        if len(done) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(a.path))
        done.append(a)
        real(a)

    monkeypatch.setattr(apply, "_apply_one", disk_fills)
    code, _, err = _install(tmp_path, etc, "--no-accounts")
    assert code == 4, err
    assert "No space left on device; 2 of" in err and "run the command again" in err
    assert "Traceback" not in err
    # finishing and undoing such a run: test_deploy_safety


def test_dry_run_diff_on_a_fresh_dir_without_slurm(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)  # its slurm.conf has no reachable slurmdbd
    before = snapshot(tmp_path)
    code, out, err = _install(tmp_path, etc, "--dry-run", "--diff")
    assert code == 0, err
    assert snapshot(tmp_path) == before
    assert f"+++ {etc}/slurm-ml.conf" in out and f"+Include {etc}/slurm-ml.conf" in out
    assert "accounts: sacctmgr unreachable" in out
    assert "sacctmgr -i add qos alloc" in out and "sacctmgr -i add user alice" in out
    assert "slurm-ml install: planning" in err  # progress on stderr


def test_rules_dir_puts_the_prometheus_rules_there(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    rules = tmp_path / "prom-rules"
    code, out, err = _install(tmp_path, etc, "--no-accounts", "--rules-dir", str(rules),
                              "--json")
    assert code == 0, err
    assert (rules / "slurm-ml.rules.yml").is_file()
    steps = json.loads(out)["next_steps"]
    assert any(f"rule_files: [{rules}/slurm-ml.rules.yml]" in s for s in steps), steps


def test_real_install_with_slurm_unreachable_exits_3_and_changes_nothing(
        tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    before = snapshot(tmp_path)
    code, _, err = _install(tmp_path, etc)
    assert code == 3 and "sacctmgr unreachable" in err and "--no-accounts" in err
    assert snapshot(tmp_path) == before


def test_json_output_shape_and_refusal_exit_1(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    code, out, _ = _install(tmp_path, etc, "--no-accounts", "--json", "--diff")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"command", "dry_run", "applied", "changed", "refused", "forced",
                        "notes", "actions", "accounts", "next_steps", "diffs"}
    assert doc["applied"] and doc["changed"] and doc["refused"] == []
    assert {"action": "create", "path": f"{etc}/slurm-ml.env", "reason": "new",
            "mode": "0600"} in doc["actions"]
    assert doc["accounts"]["skipped"] is True
    assert len(doc["diffs"]) == len(doc["actions"])
    code, out, _ = _install(tmp_path, etc, "--no-accounts", "--json")
    assert code == 0 and json.loads(out)["changed"] is False
    (etc / "job_submit.lua").write_text("-- edited\n")
    code, out, _ = _install(tmp_path, etc, "--no-accounts", "--json",
                            "--submitd-socket", "/run/other.sock")
    assert code == 1 and "job_submit.lua was changed" in json.loads(out)["refused"][0]
    code, out, _ = _run("uninstall", "--slurm-conf-dir", str(etc), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["command"] == "uninstall" and doc["refused"]
    code, out, _ = _run("uninstall", "--slurm-conf-dir", str(etc), "--force")
    assert code == 0 and "sacctmgr -i delete qos name=alloc,free" in out


def test_bad_input_exits_2(tmp_path: Path) -> None:
    code, _, err = _install(tmp_path, tmp_path, "--no-accounts")
    assert code == 2 and "slurm.conf not found" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu_types: 3\n")
    code, _, _ = _run("install", "--config", str(bad), "--slurm-conf-dir", str(tmp_path))
    assert code == 2
    etc = make_conf_dir(tmp_path)
    code, _, err = _install(tmp_path, etc, "--no-accounts", "--env", "no-equals")
    assert code == 2 and "KEY=VALUE" in err
    (etc / ".slurm-ml-manifest.json").write_text("{not json")
    code, _, err = _run("uninstall", "--slurm-conf-dir", str(etc))
    assert code == 2 and "not a slurm-ml install manifest" in err


def _units(tmp_path: Path) -> list[Path]:
    etc = make_conf_dir(tmp_path)
    p = params(tmp_path, etc, python=sys.executable, systemd_dir=tmp_path / "units")
    files = render_files(cfg(), p, state.read_sources(), [])
    out = []
    (tmp_path / "units").mkdir()
    for f in files:
        if f.path.suffix == ".service":
            f.path.write_text(f.text)
            out.append(f.path)
    return out


def test_systemd_units_are_least_privilege(tmp_path: Path) -> None:
    for unit in _units(tmp_path):
        ini = configparser.ConfigParser(strict=False, interpolation=None)
        ini.optionxform = str  # type: ignore[assignment,method-assign]
        ini.read(unit)
        svc = ini["Service"]
        for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                           ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
                           ("Restart", "on-failure"), ("User", "slurm")):
            assert svc[key] == value, (unit.name, key)
        assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"
        assert "RestartSec" in svc and "EnvironmentFile" in svc
        assert "network-online.target" in ini["Unit"]["After"]
        assert "postgresql.service" in ini["Unit"]["After"]
    submitd = tmp_path / "units" / "slurm-ml-submitd.service"
    text = submitd.read_text()
    assert "RuntimeDirectory=slurm-ml\n" in text and "--group slurm" in text
    # the daemon shares /run/slurm-ml (its wake socket) and keeps it when it stops
    daemon = ini_of(tmp_path / "units" / "slurm-ml-daemon.service")["Service"]
    assert daemon["RuntimeDirectory"] == "slurm-ml"
    assert daemon["RuntimeDirectoryPreserve"] == "yes"


def ini_of(unit: Path) -> configparser.ConfigParser:
    ini = configparser.ConfigParser(strict=False, interpolation=None)
    ini.optionxform = str  # type: ignore[assignment,method-assign]
    ini.read(unit)
    return ini


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    units = _units(tmp_path)
    res = proc.run(["systemd-analyze", "verify", "--man=no", *map(str, units)], check=False,
                   timeout_s=60)
    problems = [line for line in res.stderr.splitlines()
                if "slurm-ml" in line and ("ignoring" in line or "Unknown" in line
                                           or "Failed" in line or "not executable" in line)]
    assert res.returncode == 0 and not problems, res.stderr


def _env_dsn(etc: Path) -> str | None:
    return state_env(etc).get("SLURM_ML_DSN")


def state_env(etc: Path) -> dict[str, str]:
    from slurm_ml.deploy.bundle import parse_env_text

    return parse_env_text((etc / "slurm-ml.env").read_text())


def test_without_a_dsn_install_writes_the_local_socket_with_peer(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    code, _, err = _install(tmp_path, etc, "--no-accounts")
    assert code == 0, err
    assert _env_dsn(etc) == "host=/var/run/postgresql dbname=slurmml user=slurmml"
    assert "peer authentication" in err and "warning" not in err


def test_a_config_dsn_is_left_to_the_config(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    own = tmp_path / "slurm-ml.yaml"
    own.write_text(CONFIG.read_text().replace(
        'dsn: ""', 'dsn: "postgresql://u@db1/slurmml?require_auth=scram-sha-256"'))
    code, _, err = _install(tmp_path, etc, "--no-accounts", "--config", str(own))
    assert code == 0, err
    assert _env_dsn(etc) is None and "warning" not in err


def test_a_tcp_dsn_without_require_auth_is_warned_not_shown(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    res = CliRunner().invoke(main, [
        "install", "--config", str(CONFIG), "--slurm-conf-dir", str(etc), "--systemd-dir",
        str(tmp_path / "systemd"), "--no-accounts", "--dry-run"],
        env={"SLURM_ML_DSN": "postgresql://slurmml:s3cretpw@db1/slurmml"})
    assert res.exit_code == 0, res.stderr
    assert "slurm-ml: warning: the DSN reaches db1:5432/slurmml over TCP without " \
           "require_auth=scram-sha-256" in res.stderr
    assert "s3cretpw" not in res.stderr
