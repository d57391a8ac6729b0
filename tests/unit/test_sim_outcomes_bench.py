"""Issue 18's targets table: its scenario files (examples/sim/outcomes-*.yaml) load and
say what is a scenario choice, and benchmarks/sim_outcomes.py aggregates runs into the
table the way its docstring says (median over seeds, budget's targets)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from slurm_ml.sim.scenario_file import load_scenario

REPO = Path(__file__).resolve().parents[2]
FILES = sorted((REPO / "examples" / "sim").glob("outcomes-*.yaml"))


def _bench() -> ModuleType:
    path = REPO / "benchmarks" / "sim_outcomes.py"
    spec = importlib.util.spec_from_file_location("sim_outcomes", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod


def test_six_scenarios() -> None:
    assert len(FILES) == 6


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_scenario_file(path: Path) -> None:
    sc = load_scenario(path)
    assert sc.debug is not None and sc.debug.rate_per_team_per_hour == pytest.approx(6 / 24)
    assert sc.debug.duration_s == 600 and set(sc.debug.gpus) == {1, 2}
    assert sc.target_load is not None and 2 <= sc.target_load <= 3
    assert sc.nodes is not None and sc.gpus_per_node is not None
    assert 480 <= sc.nodes * sc.gpus_per_node <= 512
    header = path.read_text(encoding="utf-8").split("\ntrace:")[0]
    assert "not trace data" in header and "Issue 18" in header


def _record(policy: str, seed: int, **m: Any) -> dict[str, Any]:
    base = {"debug_p90_s": 30.0, "occupancy": 0.97, "worst_ratio": 0.96,
            "median_ratio": 0.99, "large_p90_s": 100.0, "loss_frac": 0.01,
            "offered_load": 2.5, "debug_jobs": 10, "large_jobs": 5, "jobs": 100,
            "preemptions": 3, "wall_s": 1.0, "worst_team": "a", "gpus": 512}
    return {"scenario": "outcomes-x", "policy": policy, "seed": seed,
            "measures": {**base, **m}}


def test_aggregate_and_render() -> None:
    mod = _bench()
    records = []
    for seed, (fifo_large, budget_large, debug) in enumerate(
            [(100.0, 50.0, 30.0), (100.0, 150.0, 90.0), (200.0, 100.0, 70.0)]):
        records.append(_record("fifo", seed, large_p90_s=fifo_large))
        records.append(_record("budget", seed, large_p90_s=budget_large,
                               debug_p90_s=debug))
    agg = mod.aggregate(records, ["outcomes-x.yaml"], [0, 1, 2])
    budget = agg["outcomes-x"]["policies"]["budget"]
    # per-seed ratios to fifo: 0.5, 1.5, 0.5 -> median 0.5, met in 2 of 3 seeds
    assert budget["large_vs_fifo"]["median"] == pytest.approx(0.5)
    assert budget["targets"]["large_vs_fifo"]["seeds_met"] == 2
    # debug p90 30, 90, 70 -> median 70 misses 60 s; met in 1 seed
    assert budget["debug_p90_s"]["median"] == pytest.approx(70.0)
    assert budget["targets"]["debug_p90_s"] == {
        "op": "<=", "threshold": 60.0, "median_met": False, "seeds_met": 1, "seeds": 3}
    assert "targets" not in agg["outcomes-x"]["policies"]["fifo"]
    table = mod.render(agg)
    assert "| budget | 70 (30–90) |" in table
    assert "**5/6**; missed: debug p90 (1/3 seeds)" in table


def test_occupancy_is_judged_against_a_fifo_under_95_percent() -> None:
    mod = _bench()
    records = []
    for seed, (fifo_occ, budget_occ) in enumerate([(0.93, 0.926), (0.93, 0.92), (0.97, 0.951)]):
        records.append(_record("fifo", seed, occupancy=fifo_occ))
        records.append(_record("budget", seed, occupancy=budget_occ))
    agg = mod.aggregate(records, ["outcomes-x.yaml"], [0, 1, 2])
    target = agg["outcomes-x"]["policies"]["budget"]["targets"]["occupancy_margin"]
    # seed 0: 92.6% >= 93% - 0.5; seed 1: 92% misses; seed 2: fifo at 97%, so >= 95%
    assert target["seeds_met"] == 2 and target["median_met"] is True


def test_a_table_reads_the_config_as_it_was_when_it_began(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          ) -> None:
    """An edit to the config while a table runs changes none of its runs: each reads a
    copy taken at the start (the same text, the same copy, so a resumed table too)."""
    mod = _bench()
    config = tmp_path / "slurm-ml.yaml"
    config.write_text("policy: {}\n", encoding="utf-8")
    read: list[str] = []

    def task(sc: str, policy: str, seed: int, *, config_path: str, **_: Any) -> Any:
        config.write_text("edited mid-table\n", encoding="utf-8")
        read.append(Path(config_path).read_text(encoding="utf-8"))
        raise RuntimeError("not a run")

    monkeypatch.setattr(mod, "_task", task)
    monkeypatch.setattr(mod, "_commit", lambda: None)
    mod.run_all([str(FILES[0])], [0, 1], jobs=1, out=tmp_path / "out",
                config_path=str(config), log=lambda _m: None, policies=("fifo",))
    assert read == ["policy: {}\n", "policy: {}\n"]
    first = mod._frozen_config(str(config), tmp_path / "out")
    assert Path(first).read_text(encoding="utf-8") == "edited mid-table\n"
    assert mod._frozen_config(str(config), tmp_path / "out") == first


def _sweep() -> ModuleType:
    sys.path.insert(0, str(REPO / "benchmarks"))
    path = REPO / "benchmarks" / "sim_load_sweep.py"
    spec = importlib.util.spec_from_file_location("sim_load_sweep", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_load_sweep_tables_the_recorded_runs_and_marks_each_miss(tmp_path: Path) -> None:
    import json

    mod = _sweep()
    for load, budget_large in (("1.5", 150.0), ("2", 80.0)):
        for rec in (_record("fifo", 0, large_p90_s=100.0, occupancy=0.94),
                    _record("budget", 0, large_p90_s=budget_large, occupancy=0.936)):
            rec["scenario"] = "outcomes-1-philly-1w"
            folder = tmp_path / f"load-{load}" / rec["scenario"]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{rec['policy']}-seed0.json").write_text(json.dumps(rec))
    table = mod.render(mod.recorded([1.5, 2.0], seeds=[0], out=tmp_path, baseline=None))
    rows = [r for r in table.splitlines() if r.startswith("| 1-philly-1w")]
    assert len(rows) == 2
    assert "**1.50** (missed)" in rows[0] and "5/6" in rows[0]
    assert "0.80" in rows[1] and "6/6" in rows[1]
    # 93.6% is under 95% but within half a point of fifo's 94%: met
    assert rows[0].split("|")[4].strip() == "93.6%"
