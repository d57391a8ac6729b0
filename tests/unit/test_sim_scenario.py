"""Scenario knobs on the real Philly trace and on small hand-made traces: slices, arrival
scaling, team weights, debug injection, job classes and the simulated cluster config."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from pathlib import Path

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, ConfigError, load_config, parse_config
from slurm_ml.policy.fairshare import Footprint, capacity_billing_gpus, fair_share
from slurm_ml.sim.scenario import (
    arrival_scale_for,
    classify,
    cluster_config,
    demand_ratio,
    implied_cluster_gpus,
    inject_debug_jobs,
    reclassify,
    scale_arrivals,
    slice_trace,
    team_weights,
    trace_config,
)
from slurm_ml.sim.traces import Trace, load_philly, load_tiresias, load_vc_nodes
from slurm_ml.sim.workload import DEBUG, LARGE, SMALL, SimJob

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "slurm_ml" / "data" / "traces"
BASE = load_config(DEFAULT_CONFIG)
HOUR = 3600.0


@pytest.fixture(scope="module")
def philly() -> Trace:
    return load_philly(TRACES / "pollux_philly" / "philly.csv")


@pytest.fixture(scope="module")
def vc_nodes() -> dict[str, int]:
    return load_vc_nodes(TRACES / "helios_calib" / "philly_vc.csv")


def small(*submits: float, gpus: int = 1, team: str = "a") -> Trace:
    jobs = tuple(SimJob(i + 1, team, f"u_{team}", t, gpus, 100.0) for i, t in enumerate(submits))
    return Trace(jobs=jobs, source="test", description="test", rows=len(jobs))


# --------------------------------------------------------------------------- time


def test_slice_bounds_are_half_open_and_rebased() -> None:
    trace = small(0, 10, 20, 30, 40)
    got = slice_trace(trace, 10, 30)
    assert [(job.job_id, job.submit_s) for job in got.jobs] == [(2, 0.0), (3, 10.0)]
    assert got.epoch_s == 10.0
    assert got.description.endswith("slice [10, 30) s: 2 jobs")
    kept = slice_trace(trace, 10, 30, rebase=False)
    assert [job.submit_s for job in kept.jobs] == [10.0, 20.0]
    for start, end in [(5, 5), (-1, 3), (3, math.inf)]:
        with pytest.raises(ValueError, match="slice needs 0 <= start < end"):
            slice_trace(trace, start, end)


def test_slice_of_philly_keeps_exactly_the_window(philly: Trace) -> None:
    start, end = 30 * 86_400.0, 37 * 86_400.0
    week = slice_trace(philly, start, end)
    expected = [job.job_id for job in philly.jobs if start <= job.submit_s < end]
    assert [job.job_id for job in week.jobs] == expected
    assert all(0 <= job.submit_s < end - start for job in week.jobs)
    assert week.epoch_s == philly.epoch_s + start
    # awk -F, '$1 >= "2017-10-04 10:30:41" && $1 < "2017-10-11 10:30:41"' philly.csv | wc -l
    assert len(week.jobs) == 13_193


def test_scale_arrivals_divides_every_gap(philly: Trace) -> None:
    trace = small(0, 10, 30, 70)
    doubled = scale_arrivals(trace, 2)
    assert [job.submit_s for job in doubled.jobs] == [0, 5, 15, 35]
    assert [job.duration_s for job in doubled.jobs] == [100.0] * 4
    week = slice_trace(philly, 30 * 86_400.0, 37 * 86_400.0)
    fast = scale_arrivals(week, 2)
    gaps = [b.submit_s - a.submit_s for a, b in itertools.pairwise(week.jobs)]
    fast_gaps = [b.submit_s - a.submit_s for a, b in itertools.pairwise(fast.jobs)]
    assert fast_gaps == pytest.approx([gap / 2 for gap in gaps])
    assert [j.duration_s for j in fast.jobs] == [j.duration_s for j in week.jobs]
    assert demand_ratio(fast, 2816) == pytest.approx(2 * demand_ratio(week, 2816))
    late = scale_arrivals(slice_trace(trace, 10, 80, rebase=False), 2)
    assert [job.submit_s for job in late.jobs] == [10, 20, 40]  # scaled from the first
    with pytest.raises(ValueError, match="must be > 0"):
        scale_arrivals(trace, 0)


def test_demand_ratio_and_the_implied_philly_cluster(
    philly: Trace, vc_nodes: dict[str, int]
) -> None:
    gpus = implied_cluster_gpus(philly, vc_nodes)
    assert gpus == 352 * 8 == 2816
    total_gpu_s = 3_521_082_502.0  # sum of the file's gpu_time column
    assert demand_ratio(philly, gpus) == pytest.approx(total_gpu_s / (9_408_690.0 * 2816))
    assert demand_ratio(philly, gpus) == pytest.approx(0.1329, abs=1e-4)
    factor = arrival_scale_for(philly, gpus, 2.5)
    assert demand_ratio(scale_arrivals(philly, factor), gpus) == pytest.approx(2.5)
    assert demand_ratio(small(0, 100), 2) == pytest.approx(200 / (100 * 2))
    with pytest.raises(ValueError, match="not a Philly VC trace"):
        implied_cluster_gpus(small(0, 1), vc_nodes)
    with pytest.raises(ValueError, match="two different times"):
        demand_ratio(small(5), 8)


# --------------------------------------------------------------------------- teams


def test_weights_follow_node_counts_for_philly_vcs(
    philly: Trace, vc_nodes: dict[str, int]
) -> None:
    weights = team_weights(philly, vc_nodes)
    assert set(weights) == set(philly.teams)
    for vc, nodes in vc_nodes.items():
        assert weights[vc] == nodes
    assert weights["6214e9"] / weights["ed69ec"] == 64 / 8
    others = {team: w for team, w in weights.items() if team not in vc_nodes}
    assert set(others) == {"23dbec", "51b7ef", "925e2b", "795a4c"}
    assert all(0 < w < 0.01 for w in others.values())  # their average busy nodes


def test_weights_without_node_counts_follow_gpu_hours() -> None:
    trace = dataclasses.replace(small(0, 100), jobs=(
        SimJob(1, "a", "u_a", 0, 4, 100.0), SimJob(2, "b", "u_b", 50, 1, 100.0),
        SimJob(3, "a", "u_a", 100, 4, 100.0)))
    weights = team_weights(trace)
    assert weights["a"] / weights["b"] == pytest.approx(800 / 100)
    assert weights["a"] == pytest.approx(800 / 100 / 8)  # average busy 8-GPU nodes


@pytest.mark.parametrize(
    ("gpus", "kind", "gpus_per_node", "expected"),
    [(1, SMALL, 8, SMALL), (8, SMALL, 8, SMALL), (9, SMALL, 8, LARGE), (16, LARGE, 8, LARGE),
     (8, SMALL, 4, LARGE), (16, LARGE, 16, SMALL), (1, DEBUG, 8, DEBUG), (16, DEBUG, 8, DEBUG)],
)
def test_classify(gpus: int, kind: str, gpus_per_node: int, expected: str) -> None:
    assert classify(SimJob(1, "a", "u", 0, gpus, 10.0, kind=kind), gpus_per_node) == expected


def test_reclassify_for_smaller_nodes(philly: Trace) -> None:
    four = reclassify(philly, 4)
    assert Counter(job.kind for job in four.jobs)[LARGE] == 289 + 1_643  # 8-GPU jobs too
    assert four.description.endswith("classes for 4 GPUs/node")


# --------------------------------------------------------------------------- debug jobs


def test_debug_injection_is_deterministic_and_at_the_rate(philly: Trace) -> None:
    rate = 0.5
    one = inject_debug_jobs(philly, rate, seed=7)
    again = inject_debug_jobs(philly, rate, seed=7)
    other = inject_debug_jobs(philly, rate, seed=8)
    assert one.jobs == again.jobs
    debug = [job for job in one.jobs if job.kind == DEBUG]
    assert debug != [job for job in other.jobs if job.kind == DEBUG]
    hours = philly.span_s / HOUR
    per_team = Counter(job.team for job in debug)
    assert set(per_team) == set(philly.teams)
    for count in per_team.values():  # Poisson: sd = sqrt(1306) ~ 36
        assert count == pytest.approx(rate * hours, abs=5 * math.sqrt(rate * hours))
    assert len(debug) == pytest.approx(rate * hours * 15, rel=0.02)
    assert len(one.jobs) == len(philly.jobs) + len(debug)
    assert all(
        (job.gpus, job.duration_s, job.min_runtime_s, job.resumable) == (1, 600.0, 900.0, False)
        for job in debug
    )
    assert all(job.user == f"vc_{job.team}" for job in debug)
    assert all(0 < job.submit_s < philly.span_s for job in debug)
    assert min(job.job_id for job in debug) == max(job.job_id for job in philly.jobs) + 1
    assert len({job.job_id for job in one.jobs}) == len(one.jobs)
    submits = [job.submit_s for job in one.jobs]
    assert submits == sorted(submits)
    assert "debug jobs (0.5/team/h, 1 GPU, 600 s, min runtime 900 s, seed 7)" in one.description


def test_debug_streams_are_per_team() -> None:
    trace = dataclasses.replace(small(0, 100 * HOUR), jobs=(
        SimJob(1, "a", "u_a", 0, 1, 10.0), SimJob(2, "b", "u_b", 0, 1, 10.0),
        SimJob(3, "b", "u_b2", 1, 1, 10.0), SimJob(4, "b", "u_b", 100 * HOUR, 1, 10.0)))
    both = inject_debug_jobs(trace, 2, seed=1, gpus=2, duration_s=300, min_runtime_s=300)
    only_b = inject_debug_jobs(trace, 2, seed=1, teams=["b"], gpus=2, duration_s=300,
                               min_runtime_s=300)

    def times(t: Trace, team: str) -> list[float]:
        return [job.submit_s for job in t.jobs if job.kind == DEBUG and job.team == team]

    assert times(both, "b") == times(only_b, "b")  # adding team a did not move b's stream
    assert times(only_b, "a") == []
    assert {job.user for job in both.jobs if job.kind == DEBUG and job.team == "b"} == {"u_b"}
    assert inject_debug_jobs(trace, 0).jobs == trace.jobs
    with pytest.raises(ValueError, match="no such team"):
        inject_debug_jobs(trace, 1, teams=["zz"])
    with pytest.raises(ValueError, match="debug rate must be >= 0"):
        inject_debug_jobs(trace, -1)


# --------------------------------------------------------------------------- cluster


def _yaml_data(config: Config) -> dict[str, object]:
    """The config's cluster, GPU types, node classes and budgets as YAML data, written
    out field by field here (not with the module's own converter)."""
    return {
        "cluster": {"name": config.cluster.name, "partitions": [
            {"name": p.name, "nodes": p.nodes, "default": p.default,
             "max_time_min": p.max_time_min} for p in config.cluster.partitions]},
        "gpu_types": {name: {"memory_gb": t.memory_gb, "nvlink_links": t.nvlink_links,
                             "compute_capability": t.compute_capability,
                             "billing_weight": t.billing_weight, "feature": t.feature}
                      for name, t in config.gpu_types.items()},
        "node_classes": [{"name": c.name, "nodes": c.nodes, "gpu_type": c.gpu_type,
                          "gpus_per_node": c.gpus_per_node, "leaf_switch": c.leaf_switch,
                          "features": list(c.features), "cpus": c.cpus,
                          "memory_mb": c.memory_mb} for c in config.node_classes],
        "budgets": {"org": config.budgets.org, "programs": [
            {"name": p.name, "weight": p.weight, "projects": [
                {"name": j.name, "weight": j.weight, "users": list(j.users)}
                for j in p.projects]} for p in config.budgets.programs]},
    }


def test_cluster_config_for_philly(philly: Trace, vc_nodes: dict[str, int]) -> None:
    weights = team_weights(philly, vc_nodes)
    config = cluster_config(BASE, 2816, weights)
    assert sum(c.gpus_per_node * len(_expand(c.nodes)) for c in config.node_classes) == 2816
    assert len(config.all_nodes()) == 352
    assert [len(_expand(c.nodes)) for c in config.node_classes] == [32] * 11
    assert len({c.leaf_switch for c in config.node_classes}) == 11
    assert {c.gpu_type for c in config.node_classes} == {"a100_80g"}
    assert config.node_classes[0].features == BASE.node_classes[0].features
    assert capacity_billing_gpus(config) == 2816.0
    assert all(p.nodes == "sim[001-352]" for p in config.cluster.partitions)
    assert [p.name for p in config.cluster.partitions] == ["gpu", "debug"]
    # every team is a project weighted as asked, with its one user
    (program,) = config.budgets.programs
    assert (config.budgets.org, program.name) == ("ml", "philly")
    assert {p.name: p.weight for p in program.projects} == weights
    assert {p.name: p.users for p in program.projects} == {
        team: (f"vc_{team}",) for team in philly.teams}
    assert config.policy == BASE.policy and config.store == BASE.store
    # the config parser accepts it as written out, and gives the same values back
    again = parse_config(_yaml_data(config))
    assert (again.budgets, again.node_classes, again.cluster) == (
        config.budgets, config.node_classes, config.cluster)
    assert config.node_class_of("sim033") == config.node_classes[1]


def test_fair_share_ranks_the_simulated_teams(philly: Trace, vc_nodes: dict[str, int]) -> None:
    config = trace_config(BASE, philly, 2816, vc_nodes)
    now = 1_000_000
    used = [Footprint(1, "6214e9", "vc_6214e9", 64.0, True, now - 7200, now - 7200, None)]
    pending = {(team, f"vc_{team}") for team in ("6214e9", "ed69ec")}
    fs = fair_share(config, used, now, pending)
    assert fs.capacity == 2816.0
    assert {s.account for s in fs.standings if s.kind == "project"} == set(philly.teams)
    ranks = {s.account: s.rank for s in fs.standings if s.kind == "user" and s.rank}
    assert ranks == {"ed69ec": 1, "6214e9": 2}  # the team that used nothing goes first
    assert fs.account("6214e9").delivered == pytest.approx(128.0)  # type: ignore[union-attr]


def test_trace_config_uses_the_trace_users() -> None:
    tiresias = load_tiresias(TRACES / "tiresias" / "60_job.csv")
    config = trace_config(BASE, tiresias, 64, gpus_per_node=4, gpu_type="v100", leaf_nodes=8)
    (program,) = config.budgets.programs
    assert [(p.name, p.users) for p in program.projects] == [("tiresias", ("tiresias",))]
    assert [c.nodes for c in config.node_classes] == ["sim[01-08]", "sim[09-16]"]
    assert config.node_classes[0].features == ("v100", "pcie")
    assert capacity_billing_gpus(config) == pytest.approx(64 * 0.4)


def test_cluster_config_leaf_remainder() -> None:
    config = cluster_config(BASE, 8 * 33, {"a": 1.0}, leaf_nodes=32)
    assert [c.nodes for c in config.node_classes] == ["sim[01-32]", "sim33"]


@pytest.mark.parametrize(
    ("gpus", "weights", "kwargs", "error", "message"),
    [
        (100, {"a": 1.0}, {}, ValueError, "100 GPUs is not a whole number of 8-GPU nodes"),
        (0, {"a": 1.0}, {}, ValueError, "is not a whole number"),
        (64, {"a": 1.0}, {"gpu_type": "h100"}, ValueError, "unknown GPU type 'h100'"),
        (64, {}, {}, ValueError, "no teams to budget"),
        (64, {"a": 1.0}, {"users": {"b": "u"}}, ValueError, "no user for team(s) a"),
        (64, {"Team": 1.0}, {}, ConfigError, "must be lower case"),
        (64, {"philly": 1.0}, {}, ConfigError, "account name"),
        (64, {"a": 0.0}, {}, ConfigError, "must be > 0"),
    ],
)
def test_cluster_config_refuses(
    gpus: int, weights: dict[str, float], kwargs: dict[str, object], error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error) as err:
        cluster_config(BASE, gpus, weights, **kwargs)  # type: ignore[arg-type]
    assert message in str(err.value)


def _expand(nodes: str) -> list[str]:
    from ClusterShell.NodeSet import NodeSet

    return list(NodeSet(nodes))
