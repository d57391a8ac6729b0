"""``slurm-ml sim`` end to end on the real 60-job Tiresias sample: policies side by side,
JSON, the report, and bad input as exit 2 with the reason."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.config import Config, load_config, revise
from slurm_ml.sim.prepare import prepare
from slurm_ml.sim.scenario_file import Scenario, parse_override, parse_scenario


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


WINDOW, CAP = "window_hours: 168", "preempt_cap_fraction: 0.02"
SETS = ("--set", "policy.fairshare.window_hours=72",
        "--set", "policy.fast_lane.preempt_cap_fraction=0.05")
POLICY = "policy: {fairshare: {window_hours: 72}, fast_lane: {preempt_cap_fraction: 0.05}}\n"


def _edited_config(tmp_path: Path) -> Path:
    """The default config with the two knobs of SETS written in it."""
    text = DEFAULT_CONFIG.read_text(encoding="utf-8")
    assert text.count(WINDOW) == 1 and text.count(CAP) == 1
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(text.replace(WINDOW, "window_hours: 72").replace(
        CAP, "preempt_cap_fraction: 0.05"), encoding="utf-8")
    return path


def test_set_simulates_the_config_of_the_same_values_written_in_the_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--set policy.KNOB=V``, the knob in a --scenario file's ``policy:`` and the value
    written in slurm-ml.yaml itself: one Config, the one the simulation runs."""
    from slurm_ml.sim import prepare as prepare_module

    simulated: list[Config] = []
    real = prepare_module.prepare

    def spy(sc: Any, base: Config, **kwargs: Any) -> Any:
        prep = real(sc, base, **kwargs)
        simulated.append(prep.cfg)
        return prep

    monkeypatch.setattr(prepare_module, "prepare", spy)
    scenario = tmp_path / "sc.yaml"
    scenario.write_text(POLICY)
    common = ("--trace", "tiresias", "--gpus", "16", "--policy", "fifo", "--json")
    for argv in [("--config", str(_edited_config(tmp_path))),
                 ("--config", str(DEFAULT_CONFIG), *SETS),
                 ("--config", str(DEFAULT_CONFIG), "--scenario", str(scenario)),
                 ("--config", str(DEFAULT_CONFIG))]:
        code, _out, err = run(*argv, *common)
        assert code == 0, err
    in_file, by_set, in_scenario, unchanged = simulated
    assert by_set == in_file and in_scenario == in_file
    assert by_set.policy.fairshare.window_hours == 72
    assert by_set.policy.fast_lane.preempt_cap_fraction == 0.05
    assert unchanged != by_set and unchanged.policy.fairshare.window_hours == 168


def test_the_functions_the_cli_calls_give_that_config_too(tmp_path: Path) -> None:
    base = load_config(DEFAULT_CONFIG)
    written = load_config(_edited_config(tmp_path))
    revised = revise(base, {"policy": {"fairshare": {"window_hours": 72},
                                       "fast_lane": {"preempt_cap_fraction": 0.05}}})
    assert revised == written
    sets = tuple(parse_override(text) for text in SETS[1::2])
    by_set = parse_scenario("{}\n", "--set", sets)
    in_scenario = parse_scenario(POLICY, "sc.yaml")
    assert by_set.policy == in_scenario.policy
    cluster = Scenario(trace="tiresias", nodes=2, policies=("fifo",))
    cfgs = [prepare(dataclasses.replace(cluster, policy=sc.policy), base).cfg
            for sc in (by_set, in_scenario)]
    assert cfgs == [prepare(cluster, written).cfg] * 2


def test_a_bad_policy_knob_is_exit_2_with_every_problem_at_its_path() -> None:
    code, _out, err = run("--trace", "tiresias", "--gpus", "16", "--policy", "fifo",
                          "--set", "policy.fairshare.window_hours=0",
                          "--set", "policy.fast_lane.preempt_cap_fractio=0.05")
    assert code == 2, err
    assert "policy.fairshare.window_hours: must be > 0" in err
    assert "policy.fast_lane.preempt_cap_fractio: unknown key (did you mean " \
           "'preempt_cap_fraction'?)" in err


def test_help_prints_percent_signs_as_written() -> None:
    res = CliRunner().invoke(main, ["sim", "--help"])
    assert "18% of GPU time" in res.stdout and "%%" not in res.stdout
