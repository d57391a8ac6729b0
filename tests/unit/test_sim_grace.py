"""QOS free's GraceTime in the simulator: a free job Slurm preempts runs on for the
grace (holding its GPUs) and is requeued when it ends; its preemptor starts then, and
picks no more victims meanwhile. The real cluster shows the same: a debug job waits
about the grace plus a few seconds (BENCHMARKS.md, "a debug job on a full real
cluster"). ``SimSettings.free_grace_s`` 0 keeps the immediate model."""

from __future__ import annotations

import pytest
from test_sim_engine import ONE_NODE, TWO_NODES, cfg_with, job, runs

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.sim.engine import SimSettings, simulate
from slurm_ml.sim.policies import POLICIES
from slurm_ml.sim.prepare import prepare
from slurm_ml.sim.scenario_file import parse_scenario

FREE = {"min_runtime_s": 0.0}
GRACE = SimSettings(free_grace_s=30.0)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_preemptor_starts_when_the_grace_ends(policy: str) -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 10_000, **FREE), job(2, "b", 2000, 2, 600)]
    result = simulate(cfg, jobs, policy, settings=GRACE)
    got = {o.job_id: o for o in result.jobs}
    assert got[2].start_s == 2030  # 30 s of grace, then Slurm requeues the victim
    assert got[1].runs[0] == (0, 2030, 4)  # it held its GPUs through the grace
    assert got[1].requeues == 1 and result.qos_preemptions == 1
    # what it ran since its last checkpoint (1800 s), grace included: 230 s x 4 GPUs
    assert got[1].lost_gpu_s == pytest.approx(230 * 4)
    instant = {o.job_id: o for o in simulate(cfg, jobs, policy).jobs}
    assert instant[2].start_s == 2000  # the default: at once


def test_no_second_victim_while_the_first_is_in_its_grace() -> None:
    """The pass that an arrival runs during the grace does not pick another free job
    for the same preemptor, nor the same victim for the next alloc job."""
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 2, 10_000, **FREE), job(2, "a", 5, 2, 10_000, **FREE),
            job(3, "b", 2000, 2, 600), job(4, "b", 2010, 1, 60, **FREE)]
    result = simulate(cfg, jobs, "fifo", settings=GRACE)
    got = {o.job_id: o for o in result.jobs}
    assert got[3].start_s == 2030
    assert got[2].requeues == 1 and got[1].requeues == 0  # the youngest, only
    assert result.qos_preemptions == 1


def test_a_victim_that_ends_in_its_grace_is_not_requeued() -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 2020, **FREE), job(2, "b", 2000, 2, 600)]
    result = simulate(cfg, jobs, "fifo", settings=GRACE)
    got = {o.job_id: o for o in result.jobs}
    assert runs(result)[1] == (0, 2020)  # it finished: nothing to requeue
    assert got[1].requeues == 0 and result.qos_preemptions == 0
    assert got[2].start_s == 2020


def test_backfill_stays_off_the_victims_gpus_during_the_grace() -> None:
    """The preemptor's reservation is made from its victims' new end: a job behind it
    that would outlast the grace does not take the GPUs they free."""
    cfg = cfg_with(TWO_NODES)
    jobs = [job(1, "a", 0, 4, 100_000), job(2, "a", 0, 4, 10_000, **FREE),
            job(3, "b", 2000, 4, 600), job(4, "a", 2001, 4, 5_000)]
    result = simulate(cfg, jobs, "fifo", settings=GRACE)
    got = {o.job_id: o for o in result.jobs}
    assert got[3].start_s == 2030
    assert got[4].start_s is not None and got[4].start_s >= 2630


def test_slurm_ml_sim_runs_the_configs_grace() -> None:
    text = ("trace: philly\nslice: {start_hours: 720, hours: 2}\n"
            "cluster: {nodes: 4, gpus_per_node: 8}\nunallocated: 0.2\npolicies: [fifo]\n")
    base = load_config(DEFAULT_CONFIG)
    prep = prepare(parse_scenario(text, "g.yaml"), base)
    assert prep.settings.free_grace_s == base.policy.contracts.free_grace_s == 30
