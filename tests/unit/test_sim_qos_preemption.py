"""Slurm's own preemption in the simulator: QOS alloc requeues QOS free work at once
(PreemptType=preempt/qos, PreemptMode=REQUEUE, as slurm-ml renders them), and the
scenario knob that makes part of a trace unallocated."""

from __future__ import annotations

import pytest
from test_sim_engine import ONE_NODE, TWO_NODES, cfg_with, job, runs

from slurm_ml.sim.engine import simulate
from slurm_ml.sim.policies import POLICIES
from slurm_ml.sim.scenario import mark_unallocated
from slurm_ml.sim.traces import Trace
from slurm_ml.sim.workload import DEBUG, SimJob

FREE = {"min_runtime_s": 0.0}


@pytest.mark.parametrize("policy", POLICIES)
def test_an_alloc_job_preempts_free_work_at_once(policy: str) -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 10_000, **FREE), job(2, "b", 2000, 2, 600)]
    result = simulate(cfg, jobs, policy)
    got = {o.job_id: o for o in result.jobs}
    assert got[2].start_s == 2000  # no wait: slurmctld preempts, not the daemon's cycle
    assert got[1].requeues == 1 and result.qos_preemptions == 1
    # the victim lost what it ran since its last checkpoint (1800 s): 200 s x 4 GPUs
    assert got[1].lost_gpu_s == pytest.approx(200 * 4)
    assert got[1].end_s is not None  # and ran again once room came back


def test_alloc_work_is_never_preempted_by_slurm() -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 1000), job(2, "b", 10, 2, 600)]
    result = simulate(cfg, jobs, "budget-nocontract")
    assert runs(result)[2] == (1000, 1600)
    assert result.qos_preemptions == 0


def test_free_work_never_preempts_free_work() -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 1000, **FREE), job(2, "b", 10, 2, 600, **FREE)]
    result = simulate(cfg, jobs, "fifo")
    assert runs(result)[2] == (1000, 1600)
    assert result.qos_preemptions == 0


def test_the_fewest_free_gpus_are_taken_youngest_first() -> None:
    cfg = cfg_with(TWO_NODES)
    jobs = [job(1, "a", 0, 3, 10_000, **FREE),   # n1: 3 of 4
            job(2, "a", 5, 1, 10_000, **FREE),   # n1: 4 of 4
            job(3, "a", 10, 2, 10_000, **FREE),  # n2: 2
            job(4, "a", 20, 2, 10_000, **FREE),  # n2: 4 of 4
            job(5, "b", 100, 2, 600)]
    got = {o.job_id: o for o in simulate(cfg, jobs, "fifo").jobs}
    assert got[5].start_s == 100
    # one 2-GPU victim suffices; on n2 the youngest is job 4 (job 2 would free only 1)
    assert [j for j in (1, 2, 3, 4) if got[j].requeues] == [4]


def test_a_gang_preempts_whole_nodes_of_free_work() -> None:
    cfg = cfg_with(TWO_NODES)
    jobs = [job(1, "a", 0, 4, 10_000, **FREE), job(2, "a", 0, 2, 10_000, **FREE),
            job(3, "b", 50, 8, 600)]
    got = {o.job_id: o for o in simulate(cfg, jobs, "fifo").jobs}
    assert got[3].start_s == 50
    assert got[1].requeues == 1 and got[2].requeues == 1


def test_no_preemption_when_it_would_not_make_room() -> None:
    cfg = cfg_with(TWO_NODES)
    jobs = [job(1, "a", 0, 4, 1000), job(2, "a", 0, 2, 10_000, **FREE),
            job(3, "b", 50, 8, 600)]
    result = simulate(cfg, jobs, "fifo")
    got = {o.job_id: o for o in result.jobs}
    # n1 holds alloc work until 1000: no preemption before, then job 2 makes way
    assert got[3].start_s == 1000
    assert result.qos_preemptions == 1
    assert got[2].lost_gpu_s == pytest.approx(1000 * 2)  # never reached a checkpoint


def test_only_free_work_on_usable_gpu_types_is_preempted() -> None:
    cfg = cfg_with([("big", "n1", "a100_80g", 4, "leaf1"),
                    ("mid", "m1", "a100_40g", 4, "leaf2")])
    jobs = [job(1, "a", 0, 4, 10_000, gpu_type="a100_40g", **FREE),
            job(2, "a", 0, 4, 1000, gpu_type="a100_80g"),
            job(3, "b", 50, 4, 600, gpu_type="a100_80g")]
    result = simulate(cfg, jobs, "fifo")
    assert result.qos_preemptions == 0
    assert runs(result)[3][0] == 1000


def small_trace(n: int) -> Trace:
    jobs = tuple(SimJob(i + 1, "a", "u_a", float(i), 1, 100.0) for i in range(n))
    jobs += (SimJob(n + 1, "a", "u_a", float(n), 1, 600.0, min_runtime_s=900.0, kind=DEBUG),)
    return Trace(jobs=jobs, source="test", description="test", rows=len(jobs))


def test_mark_unallocated_is_seeded_and_leaves_debug_jobs_alone() -> None:
    trace = small_trace(2000)
    once, again = mark_unallocated(trace, 0.25, seed=3), mark_unallocated(trace, 0.25, seed=3)
    assert once.jobs == again.jobs
    free = [j for j in once.jobs if j.min_runtime_s == 0]
    assert 400 < len(free) < 600
    assert all(j.kind != DEBUG for j in free)
    assert "unallocated" in once.description
    assert mark_unallocated(trace, 0.0) is trace
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        mark_unallocated(trace, 1.5)


def test_free_work_running_does_not_let_alloc_jobs_jump_the_reservation() -> None:
    cfg = cfg_with(TWO_NODES)
    jobs = [job(1, "a", 0, 4, 1000), job(2, "a", 0, 1, 500, **FREE),
            job(3, "b", 10, 8, 600),      # reserved at 1000 on both nodes
            job(4, "b", 20, 2, 5000)]     # would outlast the reservation
    got = runs(simulate(cfg, jobs, "fifo"))
    assert got[3] == (1000, 1600)
    assert got[4][0] == 1600


def test_a_free_job_is_not_started_and_preempted_in_the_same_pass() -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 1000), job(2, "a", 10, 4, 1000, **FREE),
            job(3, "b", 20, 4, 1000)]
    result = simulate(cfg, jobs, "fifo")
    got = {o.job_id: o for o in result.jobs}
    # fifo orders the free job first: it starts at 1000 and is preempted by job 3 at
    # the next scheduling pass (the 1200 s cycle), not in the pass that started it
    assert got[2].start_s == 1000
    assert got[3].start_s == 1200
    assert got[2].requeues == result.qos_preemptions == 1
