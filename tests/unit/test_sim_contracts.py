"""Minimum-runtime contracts in the simulator: ``requests.min_runtime_h`` draws the
--time-min each allocated trace job asks for, admission's rule caps it at
``policy.contracts.min_runtime_cap_min``, and so a sweep of the cap changes outcomes
(before, every trace job had a 1 h contract, below every cap, and the sweep printed the
same row for each value)."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, load_config
from slurm_ml.policy.admission import routing
from slurm_ml.sim.admit import draw_contracts
from slurm_ml.sim.engine import simulate
from slurm_ml.sim.prepare import prepare
from slurm_ml.sim.scenario_file import RUN, Requests, ScenarioError, parse_scenario
from slurm_ml.sim.workload import DEBUG, SimJob

BASE = load_config(DEFAULT_CONFIG)


def _cap(cfg: Config, minutes: int) -> Config:
    contracts = dataclasses.replace(cfg.policy.contracts, min_runtime_cap_min=minutes)
    return dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy,
                                                               contracts=contracts))


def _job(job_id: int, *, hours: float = 20.0, min_runtime_s: float = 3600.0,
         kind: str = "small") -> SimJob:
    return SimJob(job_id=job_id, team="t1", user="u1", submit_s=0.0, gpus=1,
                  duration_s=hours * 3600, min_runtime_s=min_runtime_s, kind=kind)


def test_the_scenario_reads_hours_and_run() -> None:
    sc = parse_scenario("requests: {min_runtime_h: {1: 0.5, 8: 0.2, run: 0.3}}\n")
    assert sc.requests == Requests(min_runtime_h={1.0: 0.5, 8.0: 0.2, RUN: 0.3})
    assert sc.as_dict()["requests"]["min_runtime_h"] == {"1": 0.5, "8": 0.2, "run": 0.3}
    for bad, why in [("requests: {min_runtime_h: {0: 1}}", r"s\.yaml:1: .*must be > 0"),
                     ("requests: {min_runtime_h: {walltime: 1}}", "hours, or run"),
                     ("requests: {min_runtime_h: {1: 0.5, 2: 0.4}}", "sum to 1"),
                     ("requests: {min_runtime_h: 4}", "map outcomes to probabilities")]:
        with pytest.raises(ScenarioError, match=why):
            parse_scenario(bad, "s.yaml")


def test_contracts_are_drawn_and_capped_as_admission_caps_them() -> None:
    jobs = [_job(i) for i in range(1, 301)]
    jobs += [_job(900, min_runtime_s=0.0), _job(901, min_runtime_s=600.0, kind=DEBUG)]
    cfg = _cap(BASE, 240)
    out, info = draw_contracts(jobs, {1: 0.5, 12: 0.3, RUN: 0.2}, cfg, seed=5)
    minutes = {j.min_runtime_s / 60 for j in out[:300]}
    assert minutes == {60.0, 240.0}  # 12 h and the 20 h run both capped at the 4 h cap
    assert out[300:] == jobs[300:]  # free and debug jobs keep theirs
    assert info["contracts_drawn"] == 300
    assert info["contracts_capped"] == sum(j.min_runtime_s == 240 * 60 for j in out)
    assert info["min_runtime_cap_min"] == 240
    # the rule is admission's own, for the same --time-min
    assert routing.protected_minutes(12 * 60, None, cfg) == (
        240, " (capped from 720 min, the most this cluster protects)")
    again, _ = draw_contracts(jobs, {1: 0.5, 12: 0.3, RUN: 0.2}, cfg, seed=5)
    other, _ = draw_contracts(jobs, {1: 0.5, 12: 0.3, RUN: 0.2}, cfg, seed=6)
    assert again == out and other != out
    short, _ = draw_contracts([_job(1, hours=0.5)], {RUN: 1.0}, cfg, seed=0)
    assert short[0].min_runtime_s == 30 * 60  # run: the whole (30-minute) run


def test_no_distribution_keeps_the_traces_contracts() -> None:
    jobs = [_job(1), _job(2)]
    assert draw_contracts(jobs, {}, BASE, seed=0) == (jobs, {})


SCENARIO = """\
trace: philly
slice: {start_hours: 720, hours: 48}
arrivals: {target_load: 2.5}
cluster: {nodes: 16, gpus_per_node: 8}
requests: {min_runtime_h: {1: 0.4, 12: 0.3, run: 0.3}}
policy: {contracts: {min_runtime_cap_min: CAP}}
policies: [budget]
seed: 0
"""


@pytest.mark.slow
@pytest.mark.timeout(180)  # three simulated weeks side by side: ~25 s on a quiet VM
def test_the_cap_changes_what_budget_may_requeue() -> None:
    """The cap is admission's, and the contracts read it where they protect a run: a
    lower cap lets the budget policy requeue long-protected work sooner, and every
    requeued run of an allocated job still lasted its (capped) contract."""
    requeues, contract, cut = {}, {}, {}
    for cap in (120, 960):
        prep = prepare(parse_scenario(SCENARIO.replace("CAP", str(cap)), "cap.yaml"),
                       BASE)
        assert prep.admission["requests"]["min_runtime_cap_min"] == cap
        result = simulate(prep.cfg, prep.trace.jobs, "budget", settings=prep.settings)
        requeues[cap] = result.preemptions - result.qos_preemptions  # no free work here
        contract[cap] = {j.job_id: j.min_runtime_s for j in prep.trace.jobs}
        cut[cap] = [(j.job_id, end - start) for j in result.jobs
                    if contract[cap][j.job_id] > 0 for start, end, _ in j.runs[:-1]]
        assert all(ran >= contract[cap][job] for job, ran in cut[cap])
    assert requeues[120] > requeues[960]
    # work the 16 h cap protects and the 2 h cap does not
    assert any(ran < contract[960][job] for job, ran in cut[120])
