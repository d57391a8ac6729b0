"""The fast lane's own requeues (``policy.lane_requeue``): which work a waiting debug job
may requeue, within which budget, and in which order."""

from __future__ import annotations

import dataclasses

import pytest
from builders import running_job, waiting_job

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import AllocationPosition, PreemptionLedger
from slurm_ml.policy.lane_requeue import lane_budget_left, lane_cap_gpus, plan_lane_requeues
from slurm_ml.policy.placement import NodeSpec, node_slots

BASE = load_config(DEFAULT_CONFIG)
CONTRACTS = BASE.policy.contracts  # 8 h cap, 1 h cooldown, 10-min cap window
LANE = dataclasses.replace(BASE.policy.fast_lane, preempt_cap_fraction=0.25, preempt_after_s=30)
NOW = 1_800_000_000
TOTAL = 16  # two 8-GPU nodes
EMPTY = PreemptionLedger(last_requeue={}, recent=[])
POSITIONS = {"nlp": AllocationPosition("nlp", 0.5, 1.6, 16.0),  # over-served
             "vision": AllocationPosition("vision", 0.5, 0.4, 0.0)}


def full(*, gpus: tuple[int, ...] = (4, 4, 6, 2), ran_s: tuple[int, ...] = (7200,) * 4,
         account: str = "nlp") -> list[RunningJob]:
    """nlp fills both nodes: jobs 1-2 on n1, 3-4 on n2, protected 1 h."""
    homes = ("n1", "n1", "n2", "n2")
    return [running_job(i + 1, start=NOW - ran, gpus=g, nodes=(homes[i],), account=account,
                        gpu_type="a100")
            for i, (g, ran) in enumerate(zip(gpus, ran_s, strict=True))]


def room(running: list[RunningJob]) -> dict[str, object]:
    return node_slots([NodeSpec("n1", "a100", "l1", 8), NodeSpec("n2", "a100", "l1", 8)],
                      running)


def debug(job_id: int = 100, *, waited: int = 60, gpus: int = 1, **more: object
          ) -> WaitingJob:
    return waiting_job(job_id, submit=NOW - waited, gpus=gpus, **more)


def plan(running: list[RunningJob], waiting: list[WaitingJob], *,
         ledger: PreemptionLedger = EMPTY, lane: object = LANE, short: tuple[int, ...] = (),
         positions: dict[str, AllocationPosition] = POSITIONS) -> list[tuple[int, int]]:
    got = plan_lane_requeues(NOW, running, waiting, positions, ledger, room(running),  # type: ignore[arg-type]
                             TOTAL, lane, CONTRACTS, short)  # type: ignore[arg-type]
    assert all(r.details["lane"] is True for r in got)
    return [(r.victim, r.for_job) for r in got]


def test_a_waiting_debug_job_requeues_the_cheapest_work_past_its_protection() -> None:
    """Every GPU is busy: the 2-GPU job on n2 (job 4) frees the fewest GPU-hours."""
    got = plan_lane_requeues(NOW, full(), [debug()], POSITIONS, EMPTY, room(full()), TOTAL,
                             LANE, CONTRACTS)
    assert [(r.victim, r.for_job, r.gpus) for r in got] == [(4, 100, 2)]
    assert "fast-lane job 100" in got[0].reason and "over-served" in got[0].reason
    assert got[0].details["waited_s"] == 60


def test_the_youngest_past_protection_loses_least() -> None:
    assert plan(full(gpus=(4, 4, 4, 4), ran_s=(7200, 4000, 9000, 9000)), [debug()]) == [
        (2, 100)]


@pytest.mark.parametrize(("case", "kw"), [
    ("protected", {"ran_s": (1800,) * 4}),  # inside the 1-h contract
    ("not over-served", {"account": "vision"}),  # vision's ratio is 0.4
])
def test_no_victim(case: str, kw: dict[str, object]) -> None:
    assert plan(full(**kw), [debug(account="llm-eval")],  # type: ignore[arg-type]
                positions={**POSITIONS, "llm-eval": AllocationPosition("llm-eval", 0.1, 0.0,
                                                                       0.0)}) == [], case


def test_not_resumable_interactive_or_short_work_is_never_a_victim() -> None:
    jobs = full(gpus=(4, 4, 6, 2))
    jobs[3] = dataclasses.replace(jobs[3], requeue=False)
    jobs[1] = dataclasses.replace(jobs[1], batch=False)
    assert plan(jobs, [debug()], short=(3,)) == [(1, 100)]  # only job 1 is left


def test_a_debug_job_waits_preempt_after_s_first_and_needs_a_starving_reason() -> None:
    assert plan(full(), [debug(waited=10)]) == []
    assert plan(full(), [debug(reason="Dependency")]) == []
    assert plan(full(), [debug(waited=30)]) == [(4, 100)]


def test_nothing_when_it_fits_now() -> None:
    running = full()[:3]  # n2 has 2 GPUs free
    assert plan(running, [debug()]) == []


def test_oldest_lane_job_first_and_each_sees_the_room_the_last_left() -> None:
    """Job 4's 2 GPUs serve both 1-GPU debug jobs (the second starts in the GPU the
    first leaves); a third needs another victim, which the 4-GPU budget has no room
    for after job 4's 2, and a budget of 8 has."""
    waiting = [debug(102, waited=40), debug(101, waited=90), debug(103, waited=35)]
    assert plan(full(), waiting[:2]) == [(4, 101)]
    assert plan(full(), waiting) == [(4, 101)]
    wide = dataclasses.replace(LANE, preempt_cap_fraction=0.5)
    jobs = full(ran_s=(9000, 7200, 7200, 7200))
    assert plan(jobs, waiting, lane=wide) == [(4, 101), (2, 103)]


def test_the_lanes_own_budget_caps_it_and_is_not_the_contracts() -> None:
    """cap = floor(0.25 x 16) = 4 GPUs per 10-min window."""
    assert lane_cap_gpus(TOTAL, LANE) == 4
    assert lane_cap_gpus(TOTAL, BASE.policy.fast_lane) == 0  # off by default
    # the contracts' requeues do not use up the lane's budget ...
    busy = PreemptionLedger(last_requeue={}, recent=[(NOW - 60, 16)])
    assert plan(full(), [debug()], ledger=busy) == [(4, 100)]
    # ... the lane's own do, within the window only
    used = PreemptionLedger(last_requeue={}, recent=[], lane_recent=[(NOW - 60, 3)])
    assert lane_budget_left(NOW, used, TOTAL, LANE, CONTRACTS) == 1
    assert plan(full(), [debug()], ledger=used) == []  # the cheapest victim holds 2 GPUs
    old = PreemptionLedger(last_requeue={}, recent=[], lane_recent=[(NOW - 700, 4)])
    assert plan(full(), [debug()], ledger=old) == [(4, 100)]
    assert plan(full(), [debug()], lane=BASE.policy.fast_lane) == []


def test_the_cooldown_protects_a_job_requeued_lately() -> None:
    recent = PreemptionLedger(last_requeue={4: NOW - 600}, recent=[])
    jobs = full(ran_s=(7200, 9000, 7200, 7200))
    assert plan(jobs, [debug()]) == [(4, 100)]
    assert plan(jobs, [debug()], ledger=recent) == [(1, 100)]


def test_a_typed_debug_job_takes_only_victims_of_its_type() -> None:
    assert plan(full(), [debug(gpu_types=frozenset({"v100"}))]) == []


def test_a_lane_job_that_fits_takes_its_room_from_the_next() -> None:
    """n2 has one GPU free: the older debug job starts there, so the younger one needs a
    victim (job 4, the cheapest) rather than counting on the same free GPU."""
    running = full(gpus=(4, 4, 6, 1))
    assert plan(running, [debug(101, waited=90)]) == []
    assert plan(running, [debug(101, waited=90), debug(102, waited=40)]) == [(4, 102)]


def test_the_daemon_reads_lane_requeues_back_into_their_own_cap() -> None:
    """From the decisions on record: every requeue counts for the job's cooldown, the
    lane's for the lane's cap only."""
    from datetime import UTC, datetime

    from slurm_ml.daemon.observe import HISTORY_KINDS
    from slurm_ml.daemon.plan import ledger
    from slurm_ml.store.records import ReconcilerDecision

    at = datetime.fromtimestamp(NOW - 60, UTC)
    history = [ReconcilerDecision(idempotency_key=f"k{j}", cycle=1, job_id=j, kind=kind,
                                  reason="", decided_at=at, dry_run=False,
                                  details={"gpus": g})
               for j, kind, g in ((1, "requeue", 8), (2, "lane_requeue", 2),
                                  (3, "zombie_requeue", 4))]
    assert "lane_requeue" in HISTORY_KINDS
    book = ledger(history)
    assert book.last_requeue == {1: NOW - 60, 2: NOW - 60, 3: NOW - 60}
    assert sorted(book.recent) == [(NOW - 60, 4), (NOW - 60, 8)]
    assert list(book.lane_recent) == [(NOW - 60, 2)]


def test_the_lane_never_takes_an_allocation_below_its_entitlement() -> None:
    """A review's case: b (ratio 0.8, not over-served) runs 12 of its 8 entitled billing
    GPUs; two lane jobs of c wait. The lane takes only over-served allocations' work, so
    nothing of b's; over-served, b gives one job (12 - 4 = 8 keeps its entitlement) and
    not a second."""
    lane = dataclasses.replace(LANE, preempt_cap_fraction=1.0)
    runs = [running_job(i, start=NOW - 10 * 3600, account="b", gpus=4, gpu_type="a100",
                        billing_gpus=4.0, time_min_s=0, nodes=(f"n{i}",)) for i in (1, 2, 3)]
    nodes = node_slots([NodeSpec(f"n{i}", "a100", "leaf1", 4) for i in (1, 2, 3)], runs)
    waiting = [waiting_job(10 + k, submit=NOW - 600, account="c", gpus=4, billing_gpus=4.0)
               for k in range(2)]

    def victims(ratio: float) -> list[int]:
        pos = {"b": AllocationPosition("b", 0.5, ratio, 12.0, 8.0),
               "c": AllocationPosition("c", 0.5, 0.1, 0.0, 8.0)}
        return [r.victim for r in plan_lane_requeues(NOW, runs, waiting, pos, EMPTY, nodes,
                                                     12, lane, CONTRACTS)]

    assert victims(0.8) == []  # not over-served: no lane victim, whatever its entitlement
    assert len(victims(1.5)) == 1
