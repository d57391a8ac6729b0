"""config.revise: a loaded config with overrides written over it is the config the same
values written in the file give, and is checked by the same rules."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import ConfigError, load_config, parse_config, revise
from slurm_ml.config.revision import config_data
from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "examples" / "slurm-ml.yaml"
TEXT = DEFAULT_CONFIG.read_text(encoding="utf-8")
BASE = load_config(DEFAULT_CONFIG)


def written(tmp_path: Path, old: str, new: str) -> Path:
    """The default config with ``old`` replaced by ``new`` in its text."""
    assert TEXT.count(old) == 1, old
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(TEXT.replace(old, new), encoding="utf-8")
    return path


@pytest.mark.parametrize("path", [DEFAULT_CONFIG, EXAMPLE], ids=["default", "example"])
def test_a_config_written_out_reads_back_the_same(path: Path) -> None:
    cfg = load_config(path)
    assert parse_config(config_data(cfg)) == cfg
    assert revise(cfg, {}) == cfg


def test_an_override_is_the_value_written_in_the_file(tmp_path: Path) -> None:
    got = revise(BASE, {"policy": {"fairshare": {"window_hours": 72},
                                   "fast_lane": {"preempt_cap_fraction": 0.05}}})
    want = load_config(written(tmp_path, "window_hours: 168", "window_hours: 72"))
    want = revise(want, {"policy": {"fast_lane": {"preempt_cap_fraction": 0.05}}})
    assert got == want
    assert got.policy.fairshare.window_hours == 72
    assert got.policy.fast_lane.preempt_cap_fraction == 0.05
    # every other knob of the section is kept
    assert dataclasses.replace(got.policy.fairshare, window_hours=168) == BASE.policy.fairshare
    assert (got.budgets, got.node_classes, got.store) == (BASE.budgets, BASE.node_classes,
                                                          BASE.store)


def test_every_problem_is_reported_at_its_path() -> None:
    with pytest.raises(ConfigError) as info:
        revise(BASE, {"policy": {"fairshare": {"window_hours": 0, "window_hourz": 1}},
                      "slurm": {"command_timeout_s": "soon"}})
    assert [str(issue) for issue in info.value.issues] == [
        "policy.fairshare.window_hourz: unknown key (did you mean 'window_hours'?)",
        "policy.fairshare.window_hours: must be > 0",
        "slurm.command_timeout_s: expected a number, got 'soon'",
    ]


def test_the_rules_across_sections_hold_for_an_override() -> None:
    with pytest.raises(ConfigError) as info:
        revise(BASE, {"policy": {"admission": {"default_min_runtime_min": 481}}})
    assert [i.path for i in info.value.issues] == ["policy.admission.default_min_runtime_min"]


def test_a_mapping_merges_anything_else_replaces() -> None:
    # a list is the whole list, as written; null is the section's defaults
    (partition, *_) = BASE.cluster.partitions
    cfg = revise(BASE, {"cluster": {"partitions": [config_data(partition)]},
                        "policy": {"fast_lane": None}})
    assert cfg.cluster.partitions == (partition,)
    assert cfg.cluster.name == BASE.cluster.name
    assert cfg.policy.fast_lane == type(BASE.policy.fast_lane)()
    assert cfg.policy.fairshare == BASE.policy.fairshare


def test_the_configs_own_objects_are_values_as_written() -> None:
    tree = BudgetTree(org=BASE.budgets.org, programs=(
        BudgetProgram(name="research", weight=1.0, projects=(
            BudgetProject(name="vision", weight=2.0, users=("ada",)),)),))
    assert revise(BASE, {"budgets": tree}).budgets == tree
    assert revise(BASE, {"budgets": tree}) == revise(BASE, {"budgets": config_data(tree)})
    with pytest.raises(ConfigError, match=r"budgets\.programs\[0\]\.projects\[0\]\.name: "
                                          "duplicate account name 'research'"):
        revise(BASE, {"budgets": dataclasses.replace(tree, programs=(dataclasses.replace(
            tree.programs[0], projects=(BudgetProject("research", 1.0, ("ada",)),)),))})


def test_a_config_changed_by_hand_is_checked() -> None:
    bad = dataclasses.replace(BASE, gpu_types={})
    with pytest.raises(ConfigError) as info:
        revise(bad, {})
    assert str(info.value.issues[0]) == "gpu_types: must define at least one GPU type"
