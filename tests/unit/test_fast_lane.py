"""The fast lane for short work (issue 18): short alloc jobs ahead of every band, capped.

Pure rules (``policy.fairshare.lane``), the daemon's cycle (the lane's SiteFactor and the
snapshot admission reads), and admission (a short job goes in the lane at submission
when the last cycle left room).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from daemon_helpers import CFG, HOUR, NOW, config, job, world
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.config import FairshareConfig, FastLaneConfig
from slurm_ml.config.rules import associations
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import fast_lane, plan_cycle
from slurm_ml.model import JobState
from slurm_ml.policy.admission import decide
from slurm_ml.policy.admission.cluster_view import cluster_view
from slurm_ml.policy.admission.state import AccountStanding, AdmissionState
from slurm_ml.policy.fairshare import band, job_site_factor
from slurm_ml.policy.fairshare.lane import (
    LaneJob,
    is_short_work,
    lane_cap,
    lane_members,
    lane_site_factor,
    lane_site_factors,
)
from slurm_ml.store.fake import FakeStore
from slurm_ml.submitd.wire import normalize, to_request

FS = FairshareConfig()
LANE = FastLaneConfig(gpus_fraction=0.1, team_gpus=4, max_job_gpus=2)
DEBUG_RECORD = 'slurm-ml {"min_runtime":10,"qos":"alloc"}'


def lj(job_id: int, account: str, gpus: int = 1, submit: int = 0, nice: int = 0) -> LaneJob:
    return LaneJob(job_id=job_id, account=account, gpus=gpus, submit=submit, nice=nice)


def members(pending: list[LaneJob], running: Sequence[LaneJob] = (), total: int = 40,
            cfg: FastLaneConfig = LANE) -> set[int]:
    got = lane_members(pending, running, total, cfg=cfg, fcfg=FS, associations=5)
    return set(got.members)


# --------------------------------------------------------------------------- pure rules


def test_oldest_first_within_the_cluster_cap() -> None:
    # cap: floor(0.1 x 40) = 4 GPUs; a, b, c, d have room for 4 jobs of 1 GPU
    jobs = [lj(i, f"t{i}", submit=100 - i) for i in range(6)]
    assert members(jobs) == {5, 4, 3, 2}


def test_a_team_holds_at_most_team_gpus() -> None:
    jobs = [lj(i, "a", gpus=2, submit=i) for i in range(4)]
    assert members(jobs, total=400) == {0, 1}


def test_running_short_work_uses_up_the_lane() -> None:
    running = [lj(90, "a", 2), lj(91, "a", 1)]
    assert members([lj(1, "a", 2, submit=1), lj(2, "a", 1, submit=2), lj(3, "b", 1, submit=3)],
                   running, total=400) == {2, 3}


def test_a_job_that_does_not_fit_lets_a_smaller_later_one_in() -> None:
    running = [lj(90, "x", 2), lj(91, "y", 1)]  # 3 of the 4 lane GPUs
    assert members([lj(1, "a", 2, submit=1), lj(2, "b", 1, submit=2)], running) == {2}


def test_larger_than_max_job_gpus_is_never_in_the_lane() -> None:
    assert members([lj(1, "a", 3)], total=400) == set()
    assert members([lj(1, "a", 0)], total=400) == set()


def test_no_lane_at_fraction_zero_or_on_a_small_cluster() -> None:
    off = dataclasses.replace(LANE, gpus_fraction=0.0)
    assert members([lj(1, "a")], cfg=off) == set()
    assert lane_cap(9, LANE) == 0 and lane_cap(10, LANE) == 1
    assert members([lj(1, "a")], total=9) == set()


@pytest.mark.parametrize(("contract", "limit", "want"), [
    (10, 10, True), (15, 60, True), (0, 30, True), (16, 30, False), (10, 61, False),
    (None, 10, False), (10, None, False), (10, 0, False)])
def test_short_work_is_a_known_short_contract_and_limit(
        contract: float | None, limit: float | None, want: bool) -> None:
    assert is_short_work(contract, limit, FairshareConfig(short_job_boost=0)) is want


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(1, 60), st.tuples(st.integers(0, 10**5), st.integers(0, 10**5)),
       st.booleans(), st.integers(2, 5000), st.data())
def test_a_lane_job_is_ahead_of_every_band_whatever_its_nice(
        rank: int, nices: tuple[int, int], short: bool, step: int,
        data: st.DataObject) -> None:
    """Net SiteFactor (what Slurm adds, less the nice it subtracts): a lane job's is above
    that of any job of any band, for every config the band rule accepts."""
    lane_nice, nice = nices
    nice_range = data.draw(st.integers(0, step - 2))
    boost = data.draw(st.integers(0, step - 1 - nice_range))
    cfg = FairshareConfig(site_factor_step=step, nice_range=nice_range, short_job_boost=boost)
    assocs = data.draw(st.integers(rank, 80))
    ranks = data.draw(st.integers(rank, assocs))
    lane = lane_site_factor(cfg, assocs)
    lane_net = job_site_factor(lane, lane_nice, cfg, True) - lane_nice
    band_net = job_site_factor(band(rank, ranks, cfg), nice, cfg, short) - nice
    assert lane_net > band_net


def test_lane_site_factors_only_for_members() -> None:
    lane = lane_members([lj(1, "a"), lj(2, "a", 3)], [], 400, cfg=LANE, fcfg=FS,
                        associations=5)
    got = lane_site_factors(lane, [lj(1, "a"), lj(2, "a", 3)], FS)
    assert got == {1: lane_site_factor(FS, 5) + FS.short_job_boost}
    assert lane.held == {"a": 1} and lane.cap == 40


# --------------------------------------------------------------------------- the daemon


def debug_job(job_id: int, user: str, account: str, **kw: object) -> object:
    return dataclasses.replace(job(job_id, user, account, gpus=1, time_min=None, **kw),
                               admin_comment=DEBUG_RECORD, time_limit_min=30)


def test_the_cycle_puts_a_low_ranked_teams_debug_job_above_every_band() -> None:
    cfg = config(fast_lane={"gpus_fraction": 0.5})
    slurm = world()
    slurm.add_job(debug_job(30, "carol", "llm-eval", submit=NOW - 600))
    plan = plan_cycle(cfg, observe(cfg, slurm, FakeStore(), NOW))
    lane = lane_site_factor(cfg.policy.fairshare, associations(cfg.budgets))
    others = {j: v for j, v in plan.site_factors.items() if j != 30}
    assert plan.site_factors[30] == lane + cfg.policy.fairshare.short_job_boost
    assert others and max(others.values()) < lane
    snap = {s.account: s.lane_gpus for s in plan.snapshots}
    assert snap["llm-eval"] == 1 and snap["llm-pretrain"] == 0
    assert snap.get("ml") is None  # not a project account


def test_over_the_team_cap_short_work_waits_in_its_band() -> None:
    cfg = config(fast_lane={"gpus_fraction": 0.5, "team_gpus": 1})
    slurm = world()
    slurm.add_job(debug_job(30, "carol", "llm-eval", submit=NOW - 600))
    slurm.add_job(debug_job(31, "carol", "llm-eval", submit=NOW - 300))
    lane = fast_lane(cfg, list(observe(cfg, slurm, FakeStore(), NOW).jobs))
    assert lane.members == {30}
    plan = plan_cycle(cfg, observe(cfg, slurm, FakeStore(), NOW))
    assert plan.site_factors[31] < lane.site_factor <= plan.site_factors[30]


def test_a_running_debug_job_counts_and_a_free_one_is_not_lane_work() -> None:
    cfg = config(fast_lane={"gpus_fraction": 0.5, "team_gpus": 1})
    slurm = world()
    slurm.add_job(debug_job(30, "carol", "llm-eval", state=JobState.RUNNING, nodes="gpu07",
                            start=NOW - 60))
    slurm.add_job(debug_job(31, "carol", "llm-eval", submit=NOW - 300))
    slurm.add_job(debug_job(32, "dave", "detection", submit=NOW - 300, qos="free"))
    lane = fast_lane(cfg, list(observe(cfg, slurm, FakeStore(), NOW).jobs))
    assert lane.members == frozenset() and lane.held == {"llm-eval": 1}


# --------------------------------------------------------------------------- admission


def standing(account: str, lane_gpus: int | None) -> AccountStanding:
    return AccountStanding(account, exhausted=False, site_factor=700, lane_gpus=lane_gpus)


def admit(lanes: dict[str, int | None], *, gpus: int = 1, limit: int = 30,
          time_min: int | None = 10) -> tuple[int | None, str]:
    state = AdmissionState(standing={a: standing(a, g) for a, g in lanes.items()},
                           loaded_at=datetime(2025, 3, 1, tzinfo=UTC))
    req = to_request(normalize({"user_name": "carol", "account": "llm-eval",
                                "tres_per_node": f"gres/gpu:{gpus}", "time_limit": limit,
                                **({"time_min": time_min} if time_min else {})}))
    d = decide(req, CFG, cluster_view(CFG), state, datetime(2025, 3, 1, tzinfo=UTC))
    assert d.accept, d.message
    assert ("lane" in d.record) is ("fast lane" in d.message)
    return d.site_factor, d.message


def test_admission_puts_a_short_job_in_the_lane_when_the_last_cycle_left_room() -> None:
    # the example cluster: 40 GPUs, lane cap floor(0.05 x 40) = 2
    lane = lane_site_factor(CFG.policy.fairshare, associations(CFG.budgets))
    factor, note = admit({"llm-eval": 0, "llm-pretrain": 1})
    assert factor == lane
    assert "fast lane" in note and "preempt unallocated" in note


@pytest.mark.parametrize(("lanes", "kw"), [
    ({"llm-eval": 0, "llm-pretrain": 2}, {}),  # the cluster's 2 lane GPUs are taken
    ({"llm-eval": 0}, {"gpus": 3}),  # above the cap (and max_job_gpus)
    ({"llm-eval": None}, {}),  # no cycle has recorded the lane yet
    ({}, {}),  # no standing at all
    ({"llm-eval": 0}, {"limit": 120}),  # not short: time limit
    ({"llm-eval": 0}, {"time_min": 30}),  # not short: contract
], ids=["cluster-full", "too-big", "no-lane-record", "no-standing", "long-limit",
        "long-contract"])
def test_admission_leaves_the_lane_to_the_daemon_otherwise(
        lanes: dict[str, int | None], kw: dict[str, int]) -> None:
    factor, note = admit(lanes, **kw)
    assert factor != lane_site_factor(CFG.policy.fairshare, associations(CFG.budgets))
    assert "fast lane" not in note


def test_lane_snapshots_travel_to_admission() -> None:
    from slurm_ml.store.records import BudgetSnapshot
    from slurm_ml.submitd.state import build_state

    taken = datetime.fromtimestamp(NOW - HOUR, UTC)
    snap = BudgetSnapshot(idempotency_key="k", taken_at=taken, account="llm-eval",
                          parent="nlp", budget_share=0.2, usage_gpu_hours=1.0,
                          owed_gpu_hours=2.0, site_factor=5, lane_gpus=2)
    state = build_state(CFG, [snap], [], taken)
    assert state.standing["llm-eval"].lane_gpus == 2


def test_why_says_a_lane_job_went_ahead_and_how_long_it_waited() -> None:
    from slurm_ml.ops import report

    cfg = config(fast_lane={"gpus_fraction": 0.5})
    slurm = world()
    lane_value = lane_site_factor(cfg.policy.fairshare, associations(cfg.budgets))
    slurm.add_job(dataclasses.replace(
        debug_job(30, "carol", "llm-eval", state=JobState.RUNNING, nodes="gpu07",
                  start=NOW - 60, submit=NOW - 72), site_factor=lane_value))
    obs = observe(cfg, slurm, FakeStore(), NOW)
    got = next(j for j in obs.jobs if j.job_id == 30)
    data = report.why_json(30, got, None, None, [], lane=fast_lane(cfg, list(obs.jobs)))
    assert data["lane"]["member"] and data["lane"]["waited_s"] == 12
    text = report.why_text(data)
    assert "Fast lane" in text and "started 12 s after its submission" in text
    assert "ahead of every team's band" in text
    other = report.why_json(20, next(j for j in obs.jobs if j.job_id == 20), None, None, [],
                            lane=fast_lane(cfg, list(obs.jobs)))
    assert not other["lane"]["member"] and "Fast lane" not in report.why_text(other)


def test_why_knows_a_running_lane_job_by_its_admission_record() -> None:
    """sprio lists only pending jobs: a running one has no SiteFactor to read."""
    from slurm_ml.ops import report

    cfg = config(fast_lane={"gpus_fraction": 0.5})
    slurm = world()
    slurm.add_job(dataclasses.replace(
        debug_job(30, "carol", "llm-eval", state=JobState.RUNNING, nodes="gpu07",
                  start=NOW - 60, submit=NOW - 65), site_factor=None,
        admin_comment='slurm-ml {"lane":1,"min_runtime":10,"qos":"alloc"}'))
    obs = observe(cfg, slurm, FakeStore(), NOW)
    got = next(j for j in obs.jobs if j.job_id == 30)
    data = report.why_json(30, got, None, None, [], lane=fast_lane(cfg, list(obs.jobs)))
    assert data["lane"]["member"] and data["lane"]["admitted_in_lane"]
    assert "started 5 s after its submission" in report.why_text(data)


def test_the_daemon_requeues_work_past_its_protection_for_a_waiting_debug_job() -> None:
    """Every v100 is busy with nlp's work (job 1 resumable, 5 h in, protected 1 min) and
    the contracts may requeue nothing (cap 0): with the lane's own cap (0.1 x 40 = 4
    GPUs) the daemon requeues job 1 for carol's debug job, once; `why` on the debug job
    says what was done for it, and a second cycle does not requeue again."""
    from daemon_helpers import daemon

    from slurm_ml.daemon.plan import ledger
    from slurm_ml.ops import report

    cfg = config(contracts={"preempt_cap_fraction": 0.01},
                 fast_lane={"gpus_fraction": 0.5, "preempt_cap_fraction": 0.1,
                            "preempt_after_s": 30})
    slurm = world()
    slurm.add_job(debug_job(30, "carol", "llm-eval", submit=NOW - 120))
    store = FakeStore()
    plan = plan_cycle(cfg, observe(cfg, slurm, store, NOW))
    assert [(a.decision, a.job_id, a.details["for_job"]) for a in plan.actions
            if a.kind == "requeue"] == [("lane_requeue", 1, 30)]

    result = daemon(slurm, store, cfg=cfg).cycle()
    assert result.report is not None
    assert [(a.decision, a.job_id) for a in result.report.applied] == [("lane_requeue", 1)]
    assert slurm.jobs[1].state == JobState.PENDING
    (made,) = store.requeues_for(30)
    assert made.kind == "lane_requeue" and made.job_id == 1 and not made.dry_run
    assert "fast-lane job 30" in made.reason and "over-served" in made.reason
    assert list(ledger(store.decisions_for_job(1)).lane_recent) == [(NOW, 4)]
    data = report.why_json(30, None, None, None, [], made_room=store.requeues_for(30))
    assert "Room made for it" in report.why_text(data) and data["made_room"][0]["victim"] == 1

    again = daemon(slurm, store, cfg=cfg).cycle()  # the lane's budget is spent, job 1 cools
    assert again.report is not None
    assert not [a for a in again.report.applied if a.kind == "requeue"]


def test_without_its_own_cap_the_lane_never_requeues_allocated_work() -> None:
    cfg = config(contracts={"preempt_cap_fraction": 0.01}, fast_lane={"gpus_fraction": 0.5})
    slurm = world()
    slurm.add_job(debug_job(30, "carol", "llm-eval", submit=NOW - 120))
    plan = plan_cycle(cfg, observe(cfg, slurm, FakeStore(), NOW))
    assert not [a for a in plan.actions if a.kind == "requeue"]
