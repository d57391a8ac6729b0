"""Ai2's delivered/owed in the report equals a hand computation from the simulated job
records (issue 17, item 2): first on a two-job case worked out on paper, then for one
team of a real overloaded run with requeues, recomputed here from ``SimResult.jobs``."""

from __future__ import annotations

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.sim import scenario, traces
from slurm_ml.sim.engine import simulate
from slurm_ml.sim.metrics import judged_window, summarize
from slurm_ml.sim.result import SimResult
from slurm_ml.sim.workload import SimJob

H = 3600.0


def test_the_paper_case() -> None:
    """One 8-GPU node, teams a and b weighted alike (4 GPUs each), fifo.

    a: 8 GPUs from 0 h to 2 h. b: 8 GPUs submitted at 1 h, waits for a, runs 2 h-4 h.
    Over [0, 4 h], hour by hour:
      a: entitled 4,4,4,4  demand 8,8,0,0  owed 4,4,0,0 = 8   busy 8,8,0,0
         toward min(busy, owed) 4,4,0,0 = 8   -> 8/8 = 100%  (surplus 16/8 = 200%)
      b: entitled 4,4,4,4  demand 0,8,8,8  owed 0,4,4,4 = 12  busy 0,0,8,8
         toward 0,0,4,4 = 8                   -> 8/12 = 66.7% (surplus 16/12 = 133%)
    b's surplus in hours 2-3 does not make up for its wait in hour 1.
    """
    cfg = scenario.cluster_config(load_config(DEFAULT_CONFIG), 8, {"a": 1.0, "b": 1.0},
                                  users={"a": "ua", "b": "ub"})
    jobs = [SimJob(1, "a", "ua", 0.0, 8, 2 * H), SimJob(2, "b", "ub", 1 * H, 8, 2 * H)]
    result = simulate(cfg, jobs, "fifo")
    s = summarize(result, window=(0.0, 4 * H), warmup_s=0.0, workload=jobs)
    a, b = s.ai2["a"], s.ai2["b"]
    assert (a.owed_gpu_h, a.delivered_gpu_h, a.delivered_owed_gpu_h) == pytest.approx((8, 16, 8))
    assert (b.owed_gpu_h, b.delivered_gpu_h, b.delivered_owed_gpu_h) == pytest.approx((12, 16, 8))
    assert a.ratio == pytest.approx(1.0) and a.surplus_ratio == pytest.approx(2.0)
    assert b.ratio == pytest.approx(8 / 12) and b.surplus_ratio == pytest.approx(16 / 12)


def test_unallocated_work_is_owed_to_no_one() -> None:
    """The paper case with b's job unallocated (QOS free, contract 0): b asked for and
    ran 8 GPUs, but free work is owed to no one, so b is owed nothing, gets no ratio and
    has no demand of its own; a is unchanged. Occupancy still counts b's run."""
    cfg = scenario.cluster_config(load_config(DEFAULT_CONFIG), 8, {"a": 1.0, "b": 1.0},
                                  users={"a": "ua", "b": "ub"})
    jobs = [SimJob(1, "a", "ua", 0.0, 8, 2 * H),
            SimJob(2, "b", "ub", 1 * H, 8, 2 * H, min_runtime_s=0)]
    result = simulate(cfg, jobs, "fifo")
    assert [j.allocated for j in result.jobs] == [True, False]
    s = summarize(result, window=(0.0, 4 * H), warmup_s=0.0, workload=jobs)
    a, b = s.ai2["a"], s.ai2["b"]
    assert (a.owed_gpu_h, a.delivered_owed_gpu_h) == pytest.approx((8, 8))
    assert (b.owed_gpu_h, b.delivered_gpu_h, b.demand_gpu_h) == (0, 0, 0)
    assert b.ratio is None and not b.enough_demand
    assert s.occupancy == pytest.approx(1.0)  # 8 GPUs busy for all 4 hours


def _overlap_h(lo: float, hi: float, a: float, b: float) -> float:
    return max(0.0, min(hi, b) - max(lo, a)) / H


def _by_hand(result: SimResult, team: str, window: tuple[float, float]) -> float:
    """The definition, written out: for each hour of the window, owed = min(entitled,
    demand), delivered toward it = min(busy, owed), from the job records alone."""
    a, b = window
    total_w = sum(w for w in result.team_weights.values() if w > 0)
    share = result.team_weights[team] / total_w * result.cluster_gpus
    mine = [j for j in result.jobs if j.team == team and j.feasible and j.allocated]
    owed = toward = 0.0
    h0 = a
    while h0 < b:
        h1 = min(h0 + H, b)
        entitled = share * (h1 - h0) / H
        demand = sum(j.gpus * _overlap_h(j.submit_s, result.end_s if j.end_s is None
                                         else j.end_s, h0, h1) for j in mine)
        busy = sum(held * _overlap_h(s, e, h0, h1) for j in mine for s, e, held in j.runs)
        o = min(entitled, demand)
        owed += o
        toward += min(busy, o)
        h0 = h1
    return toward / owed


@pytest.mark.slow
def test_one_team_of_a_real_overloaded_run() -> None:
    trace = traces.load_philly(traces.default_data_dir() / "traces/pollux_philly/philly.csv")
    trace = scenario.slice_trace(trace, 720 * H, 744 * H)
    trace = scenario.scale_arrivals(trace, scenario.arrival_scale_for(trace, 128, 2.5))
    trace = scenario.mark_unallocated(trace, 0.2, seed=0)
    cfg = scenario.trace_config(load_config(DEFAULT_CONFIG), trace, 128,
                                traces.default_vc_nodes())
    result = simulate(cfg, trace.jobs, "budget")
    assert sum(j.requeues for j in result.jobs) > 0  # runs were cut: runs matter
    for j in result.jobs:  # the records are whole: runs add up to the time run
        assert sum(e - s for s, e, _ in j.runs) == pytest.approx(j.run_s)
    window = (trace.jobs[0].submit_s, trace.jobs[-1].submit_s)
    summary = summarize(result, window=window, workload=trace.jobs)
    judged = judged_window(trace.jobs)
    assert summary.judged_window == pytest.approx(judged)
    # the team with most owed GPU-hours that did not get all of them
    short = [t for t in summary.ai2.values() if t.ratio is not None and t.ratio < 0.999]
    assert short, "nobody was short: the case does not test the cap"
    team = max(short, key=lambda t: t.owed_gpu_h)
    assert team.ratio == pytest.approx(_by_hand(result, team.team, judged), rel=1e-9)
    assert team.ratio is not None and 0 < team.ratio <= 1
