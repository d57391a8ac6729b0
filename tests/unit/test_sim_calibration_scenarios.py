"""The calibration scenario files (examples/sim/calib-*.yaml) load and run through
``slurm-ml sim --scenario`` on a short slice, on the cluster each source used, and
benchmarks/sim_calibration.py runs exactly these files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.cli import main
from slurm_ml.sim.scenario_file import load_scenario

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "sim"

# file -> (trace kind, nodes, GPUs per node, hours of arrivals to run)
CASES = {
    "calib-chronus.yaml": ("chronus", 120, 8, 0.25),  # Chronus: 1 switch x 120 nodes x 8
    "calib-gavel.yaml": ("gavel", 125, 4, 24.0),  # Gavel's cluster_specs.json: 500 V100s
}


def test_every_calibration_scenario_is_covered() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("calib-*.yaml")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_scenario_file_loads_with_the_sources_cluster(name: str) -> None:
    kind, nodes, per_node, _hours = CASES[name]
    sc = load_scenario(EXAMPLES / name)
    assert sc.trace == kind
    assert (sc.nodes, sc.gpus_per_node) == (nodes, per_node)
    assert sc.policies == ("fifo",)


@pytest.mark.parametrize("name", sorted(CASES))
def test_scenario_runs_a_short_slice_through_the_cli(name: str) -> None:
    _kind, nodes, per_node, hours = CASES[name]
    res = CliRunner().invoke(main, ["sim", "--scenario", str(EXAMPLES / name),
                                    "--hours", str(hours), "--json"])
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["scenario"]["gpus"] == nodes * per_node
    assert data["scenario"]["jobs"] > 0
    [fifo] = data["policies"]
    assert fifo["policy"] == "fifo"
    waits = fifo["waits"]["all"]
    assert waits["jobs"] > 0 and waits["mean_s"] is not None and waits["mean_s"] >= 0


def test_the_benchmark_runs_these_files_and_invents_no_figure() -> None:
    path = REPO / "benchmarks" / "sim_calibration.py"
    spec = importlib.util.spec_from_file_location("sim_calibration", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    assert sorted(Path(s.file).name for s in mod.SCENARIOS) == sorted(CASES)
    # No source publishes a FIFO figure we could check: the benchmark must say so.
    assert all(s.published is None and s.why for s in mod.SCENARIOS)
