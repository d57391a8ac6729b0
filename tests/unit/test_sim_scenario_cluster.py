"""Scenario files in slurm-ml.yaml's own schema (issue 17 item 1): a heterogeneous
cluster as node_classes, the config's own budget tree with trace teams mapped onto its
accounts, engine settings, and KEY=VALUE overrides checked by the same loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.config import load_config
from slurm_ml.sim.prepare import prepare
from slurm_ml.sim.scenario_file import ScenarioError, load_scenario, parse_override

HETERO = """\
trace: philly
slice: {start_hours: 720, hours: 6}
cluster:
  node_classes:
    - {name: big, nodes: "a[01-03]", gpu_type: a100_80g, gpus_per_node: 8,
       leaf_switch: leaf1, features: [a100_80g], cpus: 64, memory_mb: 512000}
    - {name: old, nodes: "v[01-02]", gpu_type: v100, gpus_per_node: 4,
       leaf_switch: leaf2, features: [v100], cpus: 32, memory_mb: 256000}
policies: [fifo]
engine: {cycle_s: 120}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_node_classes_make_the_cluster(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["sim", "--scenario", str(_write(tmp_path, HETERO)),
                                    "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)["scenario"]
    assert info["gpus"] == 3 * 8 + 2 * 4
    assert {c["name"]: c["gpu_type"] for c in info["node_classes"]} == {
        "big": "a100_80g", "old": "v100"}
    assert info["cycle_s"] == 120


def test_gpus_flag_cannot_resize_node_classes(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["sim", "--scenario", str(_write(tmp_path, HETERO)),
                                    "--gpus", "64"])
    assert res.exit_code == 2 and "node_classes" in res.output


def test_a_bad_node_class_is_a_config_error_with_its_field(tmp_path: Path) -> None:
    text = HETERO.replace("gpus_per_node: 4", "gpus_per_node: -4")
    res = CliRunner().invoke(main, ["sim", "--scenario", str(_write(tmp_path, text))])
    assert res.exit_code == 2
    assert "gpus_per_node" in res.output and "s.yaml" in res.output


ACCOUNTS = """\
trace: philly
slice: {start_hours: 720, hours: 6}
cluster: {nodes: 8, gpus_per_node: 8}
budgets:
  accounts:
    teams: {b436b2: llm-pretrain, 11cb48: detection}
    default: llm-eval
policies: [budget]
"""


def test_the_configs_own_tree_with_teams_mapped_onto_its_accounts(tmp_path: Path) -> None:
    base = load_config(DEFAULT_CONFIG)
    prep = prepare(load_scenario(_write(tmp_path, ACCOUNTS)), base)
    assert prep.cfg.budgets == base.budgets
    teams = {j.team for j in prep.trace.jobs}
    assert teams <= {"llm-pretrain", "detection", "llm-eval"} and "llm-eval" in teams
    res = CliRunner().invoke(main, ["sim", "--scenario", str(tmp_path / "s.yaml"), "--json"])
    assert res.exit_code == 0, res.output
    got = {t["team"] for t in json.loads(res.stdout)["policies"][0]["teams"]}
    assert got <= {"llm-pretrain", "detection", "llm-eval"}


def test_an_account_not_in_the_tree_or_an_unmapped_team_is_refused(tmp_path: Path) -> None:
    base = load_config(DEFAULT_CONFIG)
    with pytest.raises(ValueError, match="no such account in the budget tree: nope"):
        prepare(load_scenario(_write(tmp_path, ACCOUNTS.replace("llm-eval", "nope"))), base)
    with pytest.raises(ValueError, match="map to no account"):
        prepare(load_scenario(_write(tmp_path, ACCOUNTS.replace(
            "    default: llm-eval\n", ""))), base)


def test_weights_and_accounts_are_one_or_the_other(tmp_path: Path) -> None:
    text = ACCOUNTS.replace("budgets:\n", "budgets:\n  weights: {b436b2: 1}\n")
    with pytest.raises(ScenarioError, match=r"s.yaml:5: budgets: give exactly one"):
        load_scenario(_write(tmp_path, text))


def test_overrides_are_checked_like_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, HETERO)
    sc = load_scenario(path, (parse_override("engine.cycle_s=60"),
                              parse_override("arrivals.target_load=2")))
    assert (sc.cycle_s, sc.target_load) == (60, 2)
    with pytest.raises(ScenarioError, match=r"override engine\.cycle_s=0: engine\.cycle_s "
                                            r"must be > 0"):
        load_scenario(path, (parse_override("engine.cycle_s=0"),))
    with pytest.raises(ScenarioError, match=r"expected KEY\.PATH=VALUE"):
        parse_override("engine.cycle_s")
    with pytest.raises(ScenarioError, match="unknown key 'cycle'"):
        load_scenario(path, (parse_override("engine.cycle=60"),))
