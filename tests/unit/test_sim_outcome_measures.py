"""Issue 18's two extra measures (``slurm_ml.sim.metrics``): the large-job p90 wait and
the preemption loss fraction, checked against a hand computation on a tiny SimResult,
then on a small simulated run against the job records."""

from __future__ import annotations

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.sim import scenario
from slurm_ml.sim.engine import simulate
from slurm_ml.sim.metrics import (
    LARGE_JOB_GPUS,
    delivered_gpu_s,
    large_job_p90_wait,
    preemption_loss_fraction,
    summarize,
)
from slurm_ml.sim.result import JobOutcome, SimResult
from slurm_ml.sim.workload import LARGE, SMALL, SimJob


def _job(job_id: int, team: str, gpus: int, submit: float, start: float | None, *,
         runs: tuple[tuple[float, float, int], ...], lost: float = 0.0,
         requeues: int = 0) -> JobOutcome:
    end = runs[-1][1] if runs else None
    return JobOutcome(job_id=job_id, team=team, kind=LARGE if gpus > 8 else SMALL,
                      gpus=gpus, submit_s=submit, start_s=start, end_s=end,
                      run_s=sum(e - s for s, e, _ in runs), requeues=requeues,
                      lost_gpu_s=lost, runs=runs)


def _tiny() -> SimResult:
    """Six jobs, the run ends at 3,000 s:

    ===  ====  ====  ======  =====  =========================  =====  =========
    id   team  GPUs  submit  start  runs (start, end, GPUs)     lost   wait
    ===  ====  ====  ======  =====  =========================  =====  =========
    0    a     16    50      60     (60, 160, 16)              0      10
    1    a     16    100     400    (400, 1400, 16)            0      300
    2    a     32    200     1200   (1200, 1500), (1800, 2400)  9,600  1,000
    3    b     8     150     150    (150, 1150, 8)             0      0
    4    b     64    500     never  -                          0      2,500 (censored)
    5    b     16    1100    1100   (1100, 1200, 16)           0      0
    ===  ====  ====  ======  =====  =========================  =====  =========

    Job 2 was requeued once and lost its whole first run (32 x 300 = 9,600 GPU-s). A node
    fault lost 1e6 GPU-s more; that is not a preemption and must not count.
    """
    jobs = (
        _job(0, "a", 16, 50, 60, runs=((60, 160, 16),)),
        _job(1, "a", 16, 100, 400, runs=((400, 1400, 16),)),
        _job(2, "a", 32, 200, 1200, runs=((1200, 1500, 32), (1800, 2400, 32)), lost=9600,
             requeues=1),
        _job(3, "b", 8, 150, 150, runs=((150, 1150, 8),)),
        _job(4, "b", 64, 500, None, runs=()),
        _job(5, "b", 16, 1100, 1100, runs=((1100, 1200, 16),)),
    )
    return SimResult(policy="budget", cluster_gpus=64, start_s=0.0, end_s=3000.0,
                     jobs=jobs, samples=(), team_weights={"a": 1.0, "b": 1.0},
                     preemptions=1, fault_requeues=1, fault_lost_gpu_s=1e6)


def test_large_p90_by_hand() -> None:
    """Window [100, 1000]: jobs 1, 2 and 4 have >= 16 GPUs and were submitted in it (job
    0 before, job 5 after; job 3 has 8 GPUs). Waits 300, 1,000 and 2,500 (job 4 never
    started: 3,000 - 500). p90 by linear interpolation: rank 0.9 x (3 - 1) = 1.8, so
    1,000 + 0.8 x (2,500 - 1,000) = 2,200 s."""
    assert LARGE_JOB_GPUS == 16
    assert large_job_p90_wait(_tiny(), (100.0, 1000.0)) == pytest.approx(2200.0)


def test_large_p90_threshold_and_bounds() -> None:
    r = _tiny()
    # >= 32 GPUs: jobs 2 and 4, waits 1,000 and 2,500: rank 0.9 -> 1,000 + 0.9 x 1,500
    assert large_job_p90_wait(r, (100.0, 1000.0), min_gpus=32) == pytest.approx(2350.0)
    # the bounds are inclusive: [50, 50] holds job 0 alone, wait 10
    assert large_job_p90_wait(r, (50.0, 50.0)) == pytest.approx(10.0)
    # nothing large submitted in the window: nothing to judge
    assert large_job_p90_wait(r, (140.0, 160.0)) is None


def test_preemption_loss_by_hand() -> None:
    """Delivered GPU-s: 16x100 + 16x1,000 + 32x300 + 32x600 + 8x1,000 + 16x100 = 56,000
    (job 2's lost first run included, job 4 ran nothing). Lost: 9,600 (the node fault's
    1e6 is not a preemption). 9,600 / 56,000 = 6/35."""
    r = _tiny()
    assert delivered_gpu_s(r) == pytest.approx(56_000.0)
    assert preemption_loss_fraction(r) == pytest.approx(6 / 35)


def test_preemption_loss_nothing_ran() -> None:
    r = SimResult(policy="fifo", cluster_gpus=8, start_s=0.0, end_s=10.0,
                  jobs=(_job(0, "a", 8, 0, None, runs=()),), samples=(), team_weights={})
    assert delivered_gpu_s(r) == 0.0
    assert preemption_loss_fraction(r) is None


def test_on_a_simulated_run() -> None:
    """On a real (small) run the measures agree with the job records and the summary:
    delivered = GPUs x time run of every job, lost = the summary's lost GPU-hours when
    the window covers every job, and the large p90 is over the >= 16-GPU jobs only."""
    cfg = scenario.cluster_config(load_config(DEFAULT_CONFIG), 32, {"a": 1.0, "b": 1.0},
                                  users={"a": "ua", "b": "ub"})
    # team b's work is unallocated (QOS free): Slurm requeues it for a's jobs
    jobs = [SimJob(i, "ab"[i % 2], f"u{'ab'[i % 2]}", 60.0 * i, (8, 16, 32)[i % 3],
                   1800.0 + 300 * (i % 4), min_runtime_s=3600.0 if i % 2 == 0 else 0.0)
            for i in range(12)]
    result = simulate(cfg, jobs, "budget")
    s = summarize(result, window=(0.0, result.end_s), workload=jobs)
    assert delivered_gpu_s(result) == pytest.approx(sum(j.gpus * j.run_s
                                                        for j in result.jobs))
    frac = preemption_loss_fraction(result)
    assert frac is not None and frac > 0
    assert frac * delivered_gpu_s(result) / 3600 == pytest.approx(s.lost_gpu_h)
    big = sorted(j.wait_s or 0.0 for j in result.jobs if j.gpus >= 16)
    assert all(j.start_s is not None for j in result.jobs)
    p90 = large_job_p90_wait(result, (0.0, result.end_s))
    assert p90 is not None and min(big) <= p90 <= max(big)
    assert max(big) > 0  # 32 GPUs on 32: the 16- and 32-GPU jobs queue behind each other
