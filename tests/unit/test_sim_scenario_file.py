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
from slurm_ml.sim.scenario_file import ScenarioError, load_scenario

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


def test_a_target_offered_load_is_hit_within_five_percent() -> None:
    trace = scenario.slice_trace(traces.load_trace("philly"), 720 * 3600, 888 * 3600)
    factor = scenario.arrival_scale_for_load(trace, 480, 2.5)
    jobs = scenario.scale_arrivals(trace, factor).jobs
    assert offered_load(jobs, 480, judged_window(jobs)) == pytest.approx(2.5, rel=0.05)


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
