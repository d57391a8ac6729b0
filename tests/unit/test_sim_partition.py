"""Teams as hard partitions (Philly's VC quotas), used to calibrate ``fifo`` waits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.config import load_config
from slurm_ml.sim.engine import simulate
from slurm_ml.sim.partition import partition_by_team, partition_type
from slurm_ml.sim.scenario import trace_config
from slurm_ml.sim.traces import Trace
from slurm_ml.sim.workload import SimJob

REPO = Path(__file__).resolve().parents[2]
BASE = load_config(DEFAULT_CONFIG)


def two_teams() -> Trace:
    # team a: two whole-node jobs at once; team b: one; team z has no nodes
    jobs = (
        SimJob(1, "a", "vc_a", 0.0, 8, 1000.0),
        SimJob(2, "a", "vc_a", 0.0, 8, 1000.0),
        SimJob(3, "b", "vc_b", 0.0, 8, 1000.0),
        SimJob(4, "z", "vc_z", 5.0, 1, 1000.0),
    )
    return Trace(jobs=jobs, source="test", description="test", rows=len(jobs))


def test_each_team_gets_its_own_block_of_nodes() -> None:
    trace = two_teams()
    cfg, out = partition_by_team(trace_config(BASE, trace, 24), trace, {"a": 1, "b": 2})
    assert {nc.gpu_type: nc.nodes for nc in cfg.node_classes} == {
        "vc_a": "sim1", "vc_b": "sim[2-3]"}
    assert len(cfg.all_nodes()) == 3
    assert [j.gpu_type for j in out.jobs] == [partition_type("a")] * 2 + [partition_type("b")]
    assert "1 jobs of teams without nodes dropped" in out.description
    assert cfg.budgets == trace_config(BASE, trace, 24).budgets  # budgets untouched


def test_a_team_waits_for_its_own_nodes_while_others_idle() -> None:
    trace = two_teams()
    pooled = trace_config(BASE, trace, 24)
    waits = {o.job_id: o.wait_s for o in simulate(pooled, trace.jobs, "fifo").jobs}
    assert waits[2] == 0  # one pool of 3 nodes: everyone starts at once
    cfg, out = partition_by_team(pooled, trace, {"a": 1, "b": 2})
    waits = {o.job_id: o.wait_s for o in simulate(cfg, out.jobs, "fifo").jobs}
    assert waits[1] == 0 and waits[3] == 0
    assert waits[2] == pytest.approx(1000.0)  # behind job 1 on a's only node
    assert 4 not in waits


def test_bad_partitions_are_refused() -> None:
    trace = two_teams()
    cfg = trace_config(BASE, trace, 24)
    with pytest.raises(ValueError, match="no team node counts"):
        partition_by_team(cfg, trace, {})
    with pytest.raises(ValueError, match="0 nodes"):
        partition_by_team(cfg, trace, {"a": 0})


def test_cli_partition_flag_conflicts_with_gpus() -> None:
    res = CliRunner().invoke(main, ["sim", "--policy", "fifo", "--partition-by-team",
                                    "--gpus", "64", "--hours", "1"])
    assert res.exit_code == 2
    assert "--partition-by-team" in res.output


def test_cli_runs_partitioned() -> None:
    res = CliRunner().invoke(main, ["sim", "--policy", "fifo", "--partition-by-team",
                                    "--hours", "6", "--json"])
    assert res.exit_code == 0, res.output
    data = res.output[res.output.index("{"):]
    got = json.loads(data)
    assert got["scenario"]["partitioned_by_team"] is True
    assert got["scenario"]["gpus"] == 2816
