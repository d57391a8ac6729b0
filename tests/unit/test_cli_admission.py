"""The admission commands as an operator or researcher runs them (no database, no Slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_NOT_READY, EXIT_OK, main


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("SLURM_ML_DSN", raising=False)
    monkeypatch.setenv("SLURM_ML_CONFIG", str(DEFAULT_CONFIG))  # as a site sets it
    return CliRunner()


def test_submit_check_shows_the_rewrite_of_a_script(cli: CliRunner, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:a100_80g:4\n"
                      "#SBATCH --comment=gpu_mem=30G\nsrun python train.py\n")

    res = cli.invoke(main, ["submit-check", "--user", "alice", "--", str(script)])

    assert res.exit_code == EXIT_OK, res.output + res.stderr
    assert "features = '(a100_80g|a100_40g)'" in res.stdout
    assert "widened from a100_80g" in res.stdout


def test_submit_check_without_a_database_says_so_in_one_plain_line(cli: CliRunner) -> None:
    res = cli.invoke(main, ["submit-check", "--user", "alice", "--", "--gpus=1",
                            "--wrap", "true"])

    assert res.exit_code == EXIT_OK, res.output + res.stderr
    assert res.stderr == ("slurm-ml: note: no database configured (store.dsn / "
                          "$SLURM_ML_DSN); deciding without budget standing or GPU memory "
                          "profiles\n")


def test_submit_check_reads_slurm_ml_config_and_says_when_it_has_none(
        cli: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "site.yaml"
    monkeypatch.setenv("SLURM_ML_CONFIG", str(missing))
    res = cli.invoke(main, ["submit-check", "--user", "alice", "--", "--gpus=1",
                            "--wrap", "true"])
    assert res.exit_code == EXIT_BAD_INPUT and str(missing) in res.stderr

    monkeypatch.delenv("SLURM_ML_CONFIG")
    res = cli.invoke(main, ["submit-check", "--user", "alice", "--", "--gpus=1",
                            "--wrap", "true"])
    assert res.exit_code == EXIT_OK, res.output + res.stderr
    assert "checking against the packaged dev-cluster config" in res.stderr


def test_submit_check_exits_3_when_the_policy_fails_on_the_job(
        cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_ml.submitd import server

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a policy bug")

    monkeypatch.setattr(server, "reply_for", broken)
    res = cli.invoke(main, ["submit-check", "--user", "alice", "--json", "--", "--gpus=1",
                            "--wrap", "true"])
    assert res.exit_code == EXIT_NOT_READY, res.output + res.stderr
    (verdict,) = json.loads(res.stdout)
    assert verdict["action"] == "error" and "a policy bug" in verdict["message"]


def test_submit_check_shows_time_min_moved_into_the_protection(cli: CliRunner) -> None:
    res = cli.invoke(main, ["submit-check", "--user", "alice", "--", "--gres=gpu:1",
                            "--time-min=30", "-t", "120", "--wrap", "true"])

    assert res.exit_code == EXIT_OK, res.output + res.stderr
    assert "  time_min cleared\n" in res.stdout
    assert '"min_runtime":30' in res.stdout
    assert "protected from requeue for its first 30 min" in res.stdout
    assert "Slurm's --time-min was moved into this protection" in res.stdout


def test_submit_check_exits_1_with_the_reason_when_the_job_would_be_rejected(
        cli: CliRunner) -> None:
    res = cli.invoke(main, ["submit-check", "--user", "carol", "--json", "--",
                            "--gres=gpu:6", "-N2", "--wrap", "true"])

    assert res.exit_code == EXIT_FAILED
    (verdict,) = json.loads(res.stdout)
    assert verdict["action"] == "reject"
    assert verdict["code"] == 2006
    assert "would strand GPUs" in verdict["message"]


def test_submit_check_het_job_gets_one_verdict_per_component(cli: CliRunner) -> None:
    res = cli.invoke(main, ["submit-check", "--user", "bob", "--json", "--",
                            "--gpus=16", ":", "--gres=gpu:1", "--wrap", "true"])

    assert res.exit_code == EXIT_OK, res.stderr
    first, second = json.loads(res.stdout)
    assert first["set"]["min_nodes"] == 2
    assert second["component"] == 1


@pytest.mark.parametrize(("args", "text"), [
    (["--bogus", "--wrap", "true"], "sbatch would refuse this"),
    (["/nonexistent/job.sh"], "cannot read the batch script"),
], ids=["unknown-option", "missing-script"])
def test_submit_check_bad_input_exits_2(cli: CliRunner, args: list[str], text: str) -> None:
    res = cli.invoke(main, ["submit-check", "--", *args])

    assert res.exit_code == EXIT_BAD_INPUT
    assert text in res.stderr


def test_submitd_ctl_exits_3_when_submitd_is_not_running(cli: CliRunner,
                                                        tmp_path: Path) -> None:
    res = cli.invoke(main, ["submitd-ctl", "ping", "--socket", str(tmp_path / "none.sock")])

    assert res.exit_code == EXIT_NOT_READY
    assert "submitd" in res.stderr


def test_submitd_ctl_exits_1_with_submitds_error(cli: CliRunner,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_ml.submitd import client

    monkeypatch.setattr(client, "ask", lambda *_a, **_k: {
        "v": 1, "action": "error", "error": "refresh failed: database unavailable"})
    res = cli.invoke(main, ["submitd-ctl", "refresh"])

    assert res.exit_code == EXIT_FAILED
    assert "refresh failed: database unavailable" in res.stderr


@pytest.mark.parametrize("command", ["submitd", "submitd-ctl", "submit-check"])
def test_admission_commands_have_help(cli: CliRunner, command: str) -> None:
    res = cli.invoke(main, [command, "--help"])

    assert res.exit_code == 0
    assert "Usage:" in res.stdout
