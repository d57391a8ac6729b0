"""submitd's lane wakes in the simulator: a job the lane admits between cycles gets a
cycle ``preempt_after_s`` (+1 s) later, as the daemon's loop runs one, so its wait for
the lane's requeues no longer depends on where it fell in the cycle."""

from __future__ import annotations

import dataclasses

from test_sim_same_code import SETTINGS, mixed_scenario

from slurm_ml.config import Config
from slurm_ml.sim.engine import simulate
from slurm_ml.sim.result import SimResult
from slurm_ml.sim.workload import DEBUG


def _run(gap_s: float) -> SimResult:
    cfg, jobs = mixed_scenario(lane=True)
    lane = dataclasses.replace(cfg.policy.fast_lane, wake_min_gap_s=gap_s)
    cfg = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, fast_lane=lane))
    return simulate(cfg, jobs, "budget", settings=SETTINGS)


def _debug_waits(result: SimResult) -> dict[int, float]:
    return {j.job_id: (j.start_s if j.start_s is not None else result.end_s) - j.submit_s
            for j in result.jobs if j.kind == DEBUG}


def test_a_woken_cycle_makes_room_for_a_lane_job_within_preempt_after() -> None:
    cfg: Config = mixed_scenario(lane=True)[0]
    after = cfg.policy.fast_lane.preempt_after_s
    without, woken = _run(0), _run(10)
    assert without.woken_cycles == 0 and woken.woken_cycles >= 1
    before, now = _debug_waits(without), _debug_waits(woken)
    # job 53 (c, 1 GPU at 12,000 s) waited for the 12,300 s cycle; woken, its room comes
    # once it has waited preempt_after_s, plus the second the daemon adds
    assert before[53] == 100 and now[53] == after + 1
    assert all(now[j] <= before[j] for j in before)
    assert sum(now.values()) < sum(before.values())


def test_wakes_keep_the_regular_cycles_and_their_samples() -> None:
    without, woken = _run(0), _run(10)
    assert [s.t_s for s in woken.samples] == [s.t_s for s in without.samples]


def test_a_run_with_wakes_is_deterministic() -> None:
    a, b = _run(10), _run(10)
    assert a.jobs == b.jobs and a.woken_cycles == b.woken_cycles
