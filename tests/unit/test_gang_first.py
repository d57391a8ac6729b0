"""Gangs first after a wait (``policy.fairshare.gang``): a large job of a team above its
share is raised above every band once it has waited, so that backfill reserves nodes
for it. The pure rule, the daemon's cycle (the SiteFactor it pushes) and the simulator
(the gang starts when fifo would start it)."""

from __future__ import annotations

import dataclasses

import pytest
from daemon_helpers import HOUR, NOW, config, job, world
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sim_engine import TWO_NODES, cfg_with, runs
from test_sim_engine import job as sim_job

from slurm_ml.config import Config, FairshareConfig
from slurm_ml.config.rules import associations
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import plan_cycle
from slurm_ml.policy.fairshare.gang import GangJob, gangs_first, is_gang
from slurm_ml.policy.fairshare.lane import lane_site_factor
from slurm_ml.sim.engine import simulate
from slurm_ml.store.fake import FakeStore

ON = FairshareConfig(gang_min_gpus=16, gang_first_after_min=60, gang_first_count=1)


def g(job_id: int, gpus: int = 16, waited_min: float = 90, nice: int = 0) -> GangJob:
    return GangJob(job_id=job_id, gpus=gpus, submit=NOW - round(waited_min * 60), nice=nice)


def test_off_by_default_raises_nothing() -> None:
    assert gangs_first([g(1, waited_min=10_000)], NOW, FairshareConfig(), 5) == {}
    assert not is_gang(64, FairshareConfig())


@pytest.mark.parametrize(("waited_min", "raised"), [(60, True), (59.9, False)])
def test_a_gang_is_raised_once_it_has_waited_the_threshold(waited_min: float,
                                                            raised: bool) -> None:
    assert bool(gangs_first([g(1, waited_min=waited_min)], NOW, ON, 5)) is raised


def test_the_longest_waiting_gangs_go_first_up_to_the_count() -> None:
    gangs = [g(1, waited_min=100), g(2, waited_min=300), g(3, waited_min=300), g(4, gpus=8,
                                                                                  waited_min=900)]
    assert set(gangs_first(gangs, NOW, ON, 5)) == {2}  # oldest; a tie goes to the lower id
    two = dataclasses.replace(ON, gang_first_count=2)
    assert set(gangs_first(gangs, NOW, two, 5)) == {2, 3}  # job 4 is no gang: 8 < 16 GPUs


def test_a_raised_gang_is_above_every_band_and_below_lane_work() -> None:
    lane = lane_site_factor(ON, 5)
    (value,) = gangs_first([g(1)], NOW, ON, 5).values()
    assert ON.top_band(5) < value == lane < lane + ON.short_job_boost
    (niced,) = gangs_first([g(1, nice=100)], NOW, ON, 5).values()
    assert niced - 100 == value - 100  # Slurm takes the nice off: net lane - 100
    assert niced - 100 > ON.top_band(5)  # ... and still above every band


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 20_000)), max_size=12),
       st.integers(0, 3), st.integers(1, 600))
def test_never_more_than_the_count_and_only_gangs_that_waited(
        shapes: list[tuple[int, int]], count: int, after: int) -> None:
    cfg = dataclasses.replace(ON, gang_first_count=count, gang_first_after_min=after)
    gangs = [g(i, gpus, waited / 60) for i, (gpus, waited) in enumerate(shapes)]
    got = gangs_first(gangs, NOW, cfg, 5)
    assert len(got) <= count
    for job_id in got:
        assert gangs[job_id].gpus >= cfg.gang_min_gpus
        assert gangs[job_id].submit <= NOW - after * 60
    skipped = [x for x in gangs if x.job_id not in got and x.gpus >= cfg.gang_min_gpus
               and x.submit <= NOW - after * 60]
    assert all(x.submit >= max((gangs[j].submit for j in got), default=0) for x in skipped)


# --------------------------------------------------------------------------- the daemon


def with_gangs(cfg: Config, *, min_gpus: int, after_min: float) -> Config:
    fs = dataclasses.replace(cfg.policy.fairshare, gang_min_gpus=min_gpus,
                             gang_first_after_min=after_min)
    return dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, fairshare=fs))


def test_the_daemon_pushes_the_raised_gangs_site_factor() -> None:
    cfg = with_gangs(config(), min_gpus=16, after_min=60)
    slurm = world()
    # bob's team holds the a100 nodes: his 2-node gang ranks low, and has waited 2 h
    slurm.add_job(dataclasses.replace(job(40, "bob", "llm-pretrain", gpus=8, gtype="a100_80g",
                                          submit=NOW - 2 * HOUR), num_nodes=2))
    slurm.add_job(job(41, "bob", "llm-pretrain", gpus=8, gtype="a100_80g", submit=NOW - HOUR))
    plan = plan_cycle(cfg, observe(cfg, slurm, FakeStore(), NOW))
    value = lane_site_factor(cfg.policy.fairshare, associations(cfg.budgets))
    assert plan.site_factors[40] == value
    assert plan.site_factors[41] < value  # one node: no gang
    assert max(v for j, v in plan.site_factors.items() if j != 40) < value
    off = plan_cycle(config(), observe(config(), slurm, FakeStore(), NOW))
    assert off.site_factors[40] == off.site_factors[41] < value


# --------------------------------------------------------------------------- the simulator


def test_in_the_simulator_a_raised_gang_starts_when_fifo_would_start_it() -> None:
    cfg = cfg_with(TWO_NODES)
    # a has run for an hour; b keeps both nodes busy with a backlog of 2-GPU jobs, so
    # under budget b's blocked job, not a's gang, holds the reservation
    jobs = [sim_job(1, "a", 0, 4, 3600), sim_job(2, "a", 100, 8, 600),
            *(sim_job(100 + i, "b", i * 300, 2, 1800) for i in range(40))]
    assert runs(simulate(cfg, jobs, "fifo"))[2] == (3600, 4200)
    assert runs(simulate(cfg, jobs, "budget"))[2] == (5400, 6000)
    raised = with_gangs(cfg, min_gpus=8, after_min=10)
    assert runs(simulate(raised, jobs, "budget"))[2] == (3600, 4200)

