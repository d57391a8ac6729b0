"""Node faults in the simulator (issue 17 item 1): a fault ends the runs on its node
(requeued from their last checkpoint, counted apart from preemptions), the node takes no
work until it is repaired, and a scenario's fault rate makes seeded fault times."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.config import Config, load_config
from slurm_ml.sim import scenario
from slurm_ml.sim.engine import SimSettings, simulate
from slurm_ml.sim.prepare import node_faults
from slurm_ml.sim.scenario_file import Faults
from slurm_ml.sim.workload import SimJob

H = 3600.0


def _cfg() -> Config:
    return scenario.cluster_config(load_config(DEFAULT_CONFIG), 16, {"a": 1.0},
                                   users={"a": "ua"})


def test_a_fault_requeues_the_nodes_job_which_waits_for_the_repair() -> None:
    """Two 8-GPU nodes, two 4 h whole-node jobs from t=0. sim1 fails at 2,400 s for 1 h:
    its job loses the 600 s since its checkpoint (1,800 s), waits for the repair (the
    other node is busy), restarts at 6,000 s with 4 h - 1,800 s to go: ends at 18,600 s.
    A third job, submitted at 3,000 s, may not use the node under repair."""
    cfg = _cfg()
    jobs = [SimJob(1, "a", "ua", 0.0, 8, 4 * H), SimJob(2, "a", "ua", 0.0, 8, 4 * H),
            SimJob(3, "a", "ua", 3000.0, 8, 1 * H)]
    settings = dataclasses.replace(SimSettings(), faults=((2400.0, "sim1", 1 * H),))
    result = simulate(cfg, jobs, "fifo", settings=settings)
    ends = {j.job_id: j.end_s for j in result.jobs}
    hit = next(j for j in result.jobs if len(j.runs) == 2)
    assert hit.runs[0][1] == 2400.0 and hit.runs[1][0] == 6000.0
    assert ends[hit.job_id] == pytest.approx(6000.0 + 4 * H - 1800.0)
    other = 3 - hit.job_id
    assert ends[other] == 4 * H
    job3 = next(j for j in result.jobs if j.job_id == 3)
    assert job3.start_s == 4 * H  # not on sim1 while it was out
    assert (result.node_faults, result.fault_requeues, result.preemptions) == (1, 1, 0)
    assert result.fault_lost_gpu_s == pytest.approx(8 * 600.0)
    assert hit.requeues == 0 and hit.lost_gpu_s == 0.0  # a fault is not a preemption


def test_no_faults_no_change() -> None:
    cfg = _cfg()
    jobs = [SimJob(1, "a", "ua", 0.0, 8, H), SimJob(2, "a", "ua", 100.0, 16, H)]
    a = simulate(cfg, jobs, "fifo")
    b = simulate(cfg, jobs, "fifo", settings=dataclasses.replace(
        SimSettings(), faults=((10 * H, "sim2", H),)))  # after everything ended
    assert [j.end_s for j in a.jobs] == [j.end_s for j in b.jobs]


def test_an_unknown_node_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown node"):
        simulate(_cfg(), [SimJob(1, "a", "ua", 0.0, 8, H)], "fifo",
                 settings=dataclasses.replace(SimSettings(), faults=((1.0, "gpu99", H),)))


def test_fault_times_are_seeded_per_node() -> None:
    cfg = _cfg()
    f = Faults(rate_per_node_per_day=2.0, repair_hours=4)
    one = node_faults(cfg, f, start_s=0.0, end_s=30 * 86400.0, seed=0)
    assert one == node_faults(cfg, f, start_s=0.0, end_s=30 * 86400.0, seed=0)
    assert one != node_faults(cfg, f, start_s=0.0, end_s=30 * 86400.0, seed=1)
    assert {n for _, n, _ in one} == {"sim1", "sim2"}
    assert 80 <= len(one) <= 160  # 2 nodes x 2/day x 30 days = 120 expected
    assert all(r == 4 * H for _, _, r in one)


def test_a_scenario_with_faults_runs_and_reports_them(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("trace: philly\nslice: {start_hours: 720, hours: 12}\n"
                    "cluster: {nodes: 8, gpus_per_node: 8}\n"
                    "faults: {rate_per_node_per_day: 1, repair_hours: 2}\n"
                    "policies: [fifo]\n")
    res = CliRunner().invoke(main, ["sim", "--scenario", str(path), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["scenario"]["resolved"]["faults"]["rate_per_node_per_day"] == 1
    assert data["policies"][0]["node_faults"] > 0
