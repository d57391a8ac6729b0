"""The simulator's scenario file (issue 17 item 1): the shipped Ai2 example loads and
runs, bad input names file:line, and a target offered load is hit within 5%."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.cli import main
from slurm_ml.sim import scenario, traces
from slurm_ml.sim.metrics import judged_window, offered_load
from slurm_ml.sim.scenario_file import ScenarioError, load_scenario, parse_override

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sim" / "ai2-60x8.yaml"


def test_the_ai2_example_says_what_the_issue_asks() -> None:
    sc = load_scenario(EXAMPLE)
    assert (sc.nodes, sc.gpus_per_node, sc.leaf_nodes) == (60, 8, 10)  # 6 leaf switches
    assert sc.target_load == 2.5 and sc.weights is not None
    assert len(set(sc.weights.values())) > 1  # not proportional to anything
    assert sc.debug is not None and sc.debug.gpus == {1: 0.7, 2: 0.3}
    assert sc.debug.duration_s == 600 and sc.debug.rate_per_team_per_hour == pytest.approx(
        6 / 24)


def test_the_example_runs_from_one_file_and_records_itself() -> None:
    res = CliRunner().invoke(main, ["sim", "--scenario", str(EXAMPLE), "--hours", "24",
                                    "--policy", "fifo", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["scenario"]["gpus"] == 480
    assert json.dumps(data["scenario"]).count("0.7") >= 1  # the debug mix is recorded


@pytest.mark.parametrize(("text", "says"), [
    ("trace: philly\nbogus: 1\n", ":2"),
    ("trace: philly\narrivals: {target_load: -1}\n", ":2"),
    ("trace: philly\nfaults: {rate_per_node_per_day: -0.1, repair_hours: 4}\n", ":2"),
])
def test_bad_input_names_the_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=says):
        load_scenario(path)


THREE_WRONGS = """\
trace: philly
slice: {start_hours: -1, hours: 24}
arrivals: {target_load: 2.5}
cluster: {nodes: 8, gpus_per_nodes: 8}
debug:
  rate_per_team_per_day: 6
  gpus: {1: 0.7, 2: 0.2}
"""


def test_every_problem_of_a_scenario_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(THREE_WRONGS)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.issues == [
        f"{path}:2: slice.start_hours must be >= 0, got -1",
        f"{path}:4: cluster: unknown key 'gpus_per_nodes' (known: gpu_type, gpu_types, "
        "gpus_per_node, leaf_nodes, node_classes, nodes)",
        f"{path}:7: debug.gpus probabilities must sum to 1, got 0.9",
    ]
    assert str(info.value) == "\n".join(info.value.issues)


def test_duplicate_keys_and_overrides_are_reported_with_the_files_problems(
        tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("trace: philly\nseed: -1\nengine:\n  cycle_s: 60\n  cycle_s: 120\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, (parse_override("arrivals.scale=0"),
                             parse_override("trace.kind=philly")))
    assert info.value.issues == [
        f"{path}:2: seed must be an integer >= 0, got -1",
        f"{path}:5: duplicate key 'cycle_s' (YAML would silently keep only the last one)",
        f"{path}: override arrivals.scale=0: arrivals.scale must be > 0, got 0",
        f"{path}: override trace.kind='philly': trace is not a mapping",
    ]


def test_the_scenario_reader_is_the_configs(tmp_path: Path) -> None:
    """The strict reader slurm-ml.yaml goes through, with its messages: a YAML error names
    the file, line and column; a scalar that is no value is a problem where it is used."""
    path = tmp_path / "s.yaml"
    path.write_text("trace: philly\nslice: {hours: 2\n")
    with pytest.raises(ScenarioError, match=rf"^{path}: YAML syntax error at line 3, column 1: "):
        load_scenario(path)
    path.write_text("trace: philly\nseed: " + "9" * 200 + "\n")
    with pytest.raises(ScenarioError, match=rf"^{path}:2: seed must be an integer >= 0, got an "
                                            r"unreadable !!int value \(an integer of 200 digits"):
        load_scenario(path)
    path.write_text("policy: " + "[" * 80 + "]" * 80 + "\n")
    with pytest.raises(ScenarioError, match=rf"^{path}: refused at line 1, column 72: lists and "
                                            "mappings nest more than 64 deep"):
        load_scenario(path)


def test_a_scenario_of_thousands_of_problems_lists_the_first_ones(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("".join(f"bogus{i}: 1\n" for i in range(1000)))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert len(info.value.issues) == 201
    assert info.value.issues[0].startswith(f"{path}:1: scenario: unknown key 'bogus0'")
    assert info.value.issues[-1] == f"{path}: 800 more problem(s) not listed (the first 200 " \
                                    "are above)"


def test_team_names_are_read_as_written(tmp_path: Path) -> None:
    """A trace team called 103959 or 0123 is that name, not the number YAML reads; an
    override names it the same way."""
    path = tmp_path / "s.yaml"
    path.write_text("budgets:\n  weights:\n    103959: 1\n    0123: 2\n    ab12: 3\n")
    sc = load_scenario(path, (parse_override("budgets.weights.0123=5"),))
    assert sc.weights == {"103959": 1.0, "0123": 5.0, "ab12": 3.0}
    path.write_text("budgets:\n  weights:\n    103959: 1\n    0123: x\n")
    with pytest.raises(ScenarioError, match=rf"^{path}:4: budgets.weights.0123 must be a "):
        load_scenario(path)


def test_a_target_offered_load_is_hit_within_five_percent() -> None:
    trace = scenario.slice_trace(traces.load_trace("philly"), 720 * 3600, 888 * 3600)
    factor = scenario.arrival_scale_for_load(trace, 480, 2.5)
    jobs = scenario.scale_arrivals(trace, factor).jobs
    assert offered_load(jobs, 480, judged_window(jobs)) == pytest.approx(2.5, rel=0.05)


@pytest.mark.slow
def test_the_report_page_shows_the_whole_what_if(tmp_path: Path) -> None:
    """Acceptance: weights, 60 x 8 on 6 leaves, the debug mix and the 2.5x load are on
    the page itself, not only in the JSON."""
    out = tmp_path / "report"
    res = CliRunner().invoke(main, ["sim", "--scenario", str(EXAMPLE), "--hours", "24",
                                    "--policy", "fifo", "--report", str(out)])
    assert res.exit_code == 0, res.output
    page = (out / "index.html").read_text()
    assert "resolved.weights.b436b2" in page and "resolved.target_load" in page
    assert page.count("sim-leaf") == 6 and "sim-leaf6" in page  # 6 leaf switches
    assert "resolved.debug.gpus" in page and "0.7" in page
    assert "resolved.debug.rate_per_team_per_hour" in page
