"""``slurm-ml sim`` end to end on the real 60-job Tiresias sample: policies side by side,
JSON, the report, and bad input as exit 2 with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.cli import main


def run(*argv: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["sim", *argv])
    return res.exit_code, res.stdout, res.stderr


def test_two_policies_side_by_side_as_json() -> None:
    code, out, err = run("--trace", "tiresias", "--gpus", "16", "--policy", "fifo",
                         "--policy", "budget", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [p["policy"] for p in data["policies"]] == ["fifo", "budget"]
    assert data["scenario"]["jobs"] == 60 and data["scenario"]["gpus"] == 16
    assert all(p["jobs"] == 60 for p in data["policies"])
    assert all(len(p["targets"]) == 6 for p in data["policies"])  # every outcome target
    assert "simulating 60 jobs" in err


def test_text_table_and_report(tmp_path: Path) -> None:
    code, out, err = run("--trace", "tiresias", "--gpus", "16", "--policy", "fifo",
                         "--report", str(tmp_path / "rep"))
    assert code == 0, err
    assert "fifo" in out.splitlines()[0] and "occupancy" in out
    assert json.loads((tmp_path / "rep" / "report.json").read_text())
    assert (tmp_path / "rep" / "index.html").exists()


def test_a_report_that_cannot_be_written_still_prints_the_results(tmp_path: Path) -> None:
    (tmp_path / "rep" / "index.html").mkdir(parents=True)  # the page cannot be written
    code, out, err = run("--trace", "tiresias", "--gpus", "16", "--policy", "fifo",
                         "--report", str(tmp_path / "rep"))
    assert code == 1, err
    assert "fifo" in out.splitlines()[0] and "occupancy" in out  # the results, whole
    assert f"report: NOT written: {tmp_path / 'rep' / 'index.html'}" in err


@pytest.mark.parametrize(("argv", "needle"), [
    (["--trace", "nosuch"], "unknown kind 'nosuch'"),
    (["--trace", "tiresias:/no/such/file.csv", "--gpus", "8"], "/no/such/file.csv"),
    (["--trace", "tiresias"], "not a Philly VC trace"),
    (["--trace", "pollux"], "no run-time column"),
    (["--trace", "tiresias", "--gpus", "8", "--scale", "2", "--demand", "2"], "not both"),
    (["--trace", "tiresias", "--gpus", "8", "--start-hours", "1000", "--hours", "1"],
     "no jobs"),
    (["--trace", "tiresias", "--gpus", "16", "--set", "engine.cycle_s"], "expected KEY.PATH=VALUE"),
    (["--trace", "tiresias", "--gpus", "16", "--set", "engine.cycle_z=60"], "cycle_z"),
], ids=["unknown-kind", "missing-file", "no-cluster-size", "pollux-needs-durations",
        "scale-and-demand", "empty-slice", "set-without-value", "set-unknown-key"])
def test_bad_input_is_exit_2_with_the_reason(argv: list[str], needle: str) -> None:
    code, _out, err = run(*argv)
    assert code == 2 and needle in err, err


def test_set_gives_the_same_run_as_the_key_written_in_a_scenario_file(tmp_path: Path) -> None:
    scenario = tmp_path / "sc.yaml"
    scenario.write_text("engine: {cycle_s: 120}\n")
    common = ("--trace", "tiresias", "--gpus", "16", "--policy", "budget", "--json")
    code, from_file, err = run("--scenario", str(scenario), *common)
    assert code == 0, err
    code, from_set, err = run("--set", "engine.cycle_s=120", *common)
    assert code == 0, err
    a, b = json.loads(from_file), json.loads(from_set)
    for data in (a, b):
        data["scenario"]["resolved"].pop("source")
        for p in data["policies"]:
            p.pop("wall_s")
    assert a["scenario"]["cycle_s"] == 120
    assert a == b


def test_help_prints_percent_signs_as_written() -> None:
    res = CliRunner().invoke(main, ["sim", "--help"])
    assert "18% of GPU time" in res.stdout and "%%" not in res.stdout
