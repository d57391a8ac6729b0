"""Why the shim can trust submitd's answers: the socket's directory and the reply key."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG, asset_path
from slurm_ml.cli import main
from slurm_ml.config import load_config
from slurm_ml.slurm.render import render_shim
from slurm_ml.submitd.auth import KeyFileError, load_or_create_key, socket_dir_problem
from slurm_ml.submitd.client import ask
from slurm_ml.submitd.server import Listener, PolicyServer, SubmitdError
from slurm_ml.submitd.state import StateRefresher

CFG = load_config(DEFAULT_CONFIG)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _server() -> PolicyServer:
    return PolicyServer(CFG, StateRefresher(None, CFG))


# ------------------------------------------------------------------------- reply key


def test_a_missing_key_is_made_private_and_then_kept(tmp_path: Path) -> None:
    path = tmp_path / "submitd.key"
    key = load_or_create_key(path)
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert load_or_create_key(path) == key  # a restart keeps the shim's key valid


@pytest.mark.parametrize(("mode", "says"), [
    (0o644, "lets every user read"), (0o660, "lets others write"), (0o606, "lets others write"),
])
def test_a_key_others_can_read_or_write_is_refused(tmp_path: Path, mode: int,
                                                   says: str) -> None:
    path = tmp_path / "submitd.key"
    load_or_create_key(path)
    path.chmod(mode)
    with pytest.raises(KeyFileError, match=says):
        load_or_create_key(path)


def test_a_file_that_is_not_a_key_is_refused_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "submitd.key"
    path.write_text("hunter2\n")
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="not a submitd reply key"):
        load_or_create_key(path)


def test_a_key_in_a_directory_that_does_not_exist_is_a_named_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot read or create"):
        load_or_create_key(tmp_path / "nowhere" / "submitd.key")


@as_root
def test_a_key_another_user_owns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "submitd.key"
    load_or_create_key(path)
    os.chown(path, 65534, -1)
    with pytest.raises(KeyFileError, match="owned by uid 65534"):
        load_or_create_key(path)


def test_every_reply_on_the_socket_carries_the_key(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "k")
    lst = Listener(_server(), tmp_path / "s.sock", auth_key=key)
    lst.start()
    try:
        assert ask(lst.path, {"v": 1, "op": "ping"})["auth"] == key
        reply = ask(lst.path, {"v": 1, "op": "submit",
                               "job": {"user_name": "bob", "tres_per_job": "gres:gpu:16"}})
        assert reply["action"] == "accept" and reply["auth"] == key
        assert ask(lst.path, {"v": 1, "op": "nope"})["auth"] == key  # errors too
    finally:
        lst.close()


def test_without_a_key_replies_carry_none(tmp_path: Path) -> None:
    lst = Listener(_server(), tmp_path / "s.sock")
    lst.start()
    try:
        assert "auth" not in ask(lst.path, {"v": 1, "op": "ping"})
    finally:
        lst.close()


# ---------------------------------------------------------------- socket directory


def test_a_private_directory_is_fine(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    assert socket_dir_problem(run / "submitd.sock") is None
    assert socket_dir_problem(tmp_path / "not-yet" / "submitd.sock") is None


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o757])
def test_a_directory_every_user_may_write_is_refused_sticky_or_not(tmp_path: Path,
                                                                  mode: int) -> None:
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(mode)
    problem = socket_dir_problem(run / "submitd.sock")
    assert problem is not None and "writable by every user" in problem
    with pytest.raises(SubmitdError, match="refusing to listen"):
        Listener(_server(), run / "submitd.sock")
    assert not (run / "submitd.sock").exists()


@as_root
def test_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    os.chown(run, 65534, -1)
    problem = socket_dir_problem(run / "submitd.sock")
    assert problem is not None and "owned by uid 65534" in problem


def test_closing_leaves_a_socket_a_later_submitd_bound(tmp_path: Path) -> None:
    """A killed submitd's clean-up must not remove the socket of the one that replaced
    it, which would leave the new one listening on a path nobody can reach."""
    path = tmp_path / "s.sock"
    first = Listener(_server(), path)
    path.unlink()  # as if the first had been killed and its path claimed anew
    second = Listener(_server(), path)
    second.start()
    try:
        first.close()
        assert path.exists()
        assert ask(path, {"v": 1, "op": "ping"})["action"] == "pong"
    finally:
        second.close()
    assert not path.exists()


def test_config_check_refuses_a_socket_directory_others_may_write(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o1777)
    sock = str(run / "submitd.sock")

    res = CliRunner().invoke(main, ["config", "check", str(DEFAULT_CONFIG),
                                    "--submitd-socket", sock])
    assert res.exit_code == 2
    assert "submitd socket:" in res.output and "writable by every user" in res.output
    res = CliRunner().invoke(main, ["config", "check", str(DEFAULT_CONFIG), "--json",
                                    "--submitd-socket", sock])
    assert res.exit_code == 2
    assert json.loads(res.stdout)["errors"][0]["path"] == "submitd socket"
    run.chmod(0o755)
    ok = CliRunner().invoke(main, ["config", "check", str(DEFAULT_CONFIG),
                                   "--submitd-socket", sock])
    assert ok.exit_code == 0, ok.output


# ---------------------------------------------------------------------- the shim


def test_install_renders_the_key_path_into_the_shim() -> None:
    text = asset_path("job_submit", "job_submit.lua").read_text()
    shim = render_shim(text, CFG, "/run/slurm-ml/submitd.sock", "/var/lib/slurm-ml/submitd.key")
    assert 'local AUTH_KEY_PATH = "/var/lib/slurm-ml/submitd.key"' in shim
    assert 'local AUTH_KEY_PATH = ""' in render_shim(text, CFG, "/run/slurm-ml/submitd.sock")


def test_the_submitd_unit_makes_and_passes_the_key(tmp_path: Path) -> None:
    from slurm_ml.deploy import bundle, state

    p = bundle.InstallParams(conf_dir=tmp_path, config_path=tmp_path / "slurm-ml.yaml",
                             python="/usr/bin/python3")
    files = {f.path.name: f for f in bundle.render_files(CFG, p, state.read_sources(), [])}
    unit = files["slurm-ml-submitd.service"].text
    assert "--key-file /var/lib/slurm-ml/submitd.key" in unit
    assert "StateDirectory=slurm-ml\nStateDirectoryMode=0750" in unit
    assert 'AUTH_KEY_PATH = "/var/lib/slurm-ml/submitd.key"' in files["job_submit.lua"].text


@as_root
def test_config_check_accepts_a_directory_submitds_user_owns(tmp_path: Path) -> None:
    """install's /run/slurm-ml is SlurmUser's (systemd's RuntimeDirectory), mode 0750:
    correct, though config check runs as root."""
    run = tmp_path / "run"
    run.mkdir(mode=0o750)
    os.chown(run, 65534, 65534)
    sock = str(run / "submitd.sock")
    as_nobody = CliRunner().invoke(main, ["config", "check", str(DEFAULT_CONFIG),
                                          "--submitd-socket", sock, "--submitd-user", "nobody"])
    assert as_nobody.exit_code == 0, as_nobody.output
    as_slurm = CliRunner().invoke(main, ["config", "check", str(DEFAULT_CONFIG),
                                         "--submitd-socket", sock,
                                         "--submitd-user", "no-such-user"])
    assert as_slurm.exit_code == 2 and "owned by uid 65534" in as_slurm.output


def test_a_directory_another_group_may_write_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o770)
    other = 12345 if os.getegid() != 12345 else 12346
    if os.geteuid() == 0:
        os.chown(run, -1, other)
        problem = socket_dir_problem(run / "s.sock")
        assert problem is not None and f"writable by group {other}" in problem
    assert socket_dir_problem(run / "s.sock", user_gid=other) is None


def test_a_symlinked_key_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.key"
    load_or_create_key(real)
    link = tmp_path / "submitd.key"
    link.symlink_to(real)
    with pytest.raises(KeyFileError, match="symbolic link"):
        load_or_create_key(link)


def test_the_env_file_names_the_key_for_a_submitd_started_by_hand(tmp_path: Path) -> None:
    from slurm_ml.deploy import bundle

    p = bundle.InstallParams(conf_dir=tmp_path, config_path=tmp_path / "c.yaml",
                             python="/usr/bin/python3", systemd_dir=None)
    env = bundle.parse_env_text(bundle.env_text(p))
    assert env["SLURM_ML_SUBMITD_KEY_FILE"] == "/var/lib/slurm-ml/submitd.key"
