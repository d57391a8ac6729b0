"""Scheduling contracts: who is starved, who may be requeued for it, the loop-free rule,
the preemption budget, and the reason each requeue carries."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from builders import running_job, waiting_job
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.config import ContractsConfig
from slurm_ml.model import ALLOC_QOS, FREE_QOS
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import (
    AllocationPosition,
    PreemptionLedger,
    Requeue,
    after_requeues,
    loop_free,
    plan_requeues,
    preemption_budget_left,
    preemption_cap,
    reclaims,
    starving_reason,
    victim_blocker,
)
from slurm_ml.policy.placement import NodeSlot, NodeSpec, node_slots

NOW = 1_800_000_000
H = 3600
CFG = ContractsConfig()  # 8 h cap, 1 h cooldown, 5 % per 10 min, gap 0.2, 300 s wait
EMPTY = PreemptionLedger(last_requeue={}, recent=())
BIG = 1000  # total GPUs: a cap of 50, so the budget never binds unless a test wants it


def run(job_id: int, account: str = "nlp", *, gpus: int = 8, gpu_type: str | None = "a100",
        ran: int = 10 * H, time_min: int | None = H, requeue: bool = True, batch: bool = True,
        qos: str = ALLOC_QOS, billing: float | None = None) -> RunningJob:
    return running_job(job_id, start=NOW - ran, account=account, qos=qos, gpus=gpus,
                       gpu_type=gpu_type, billing_gpus=float(gpus) if billing is None else billing,
                       time_min_s=time_min, requeue=requeue, batch=batch)


def wait(job_id: int = 123, account: str = "vision", *, gpus: int = 8,
         types: frozenset[str] = frozenset(), waited: int = H, reason: str = "Resources",
         qos: str = ALLOC_QOS, order: int = 0, billing: float | None = None) -> WaitingJob:
    return waiting_job(job_id, submit=NOW - waited, account=account, qos=qos, gpus=gpus,
                       gpu_types=types, billing_gpus=float(gpus) if billing is None else billing,
                       reason=reason, order=order)


def pos(account: str, share: float, ratio: float | None, running: float) -> AllocationPosition:
    return AllocationPosition(account=account, budget_share=share, ratio=ratio,
                              running_billing_gpus=running)


def positions(*ps: AllocationPosition) -> dict[str, AllocationPosition]:
    return {p.account: p for p in ps}


# nlp is over-served and runs 24 billing GPUs on half the budget; vision is under-served.
NLP = pos("nlp", 0.5, 1.31, 24.0)
VISION = pos("vision", 0.5, 0.42, 0.0)
BASE_RUNNING = [run(1, ran=10 * H), run(2, ran=11 * H), run(3, ran=12 * H)]


def layout(running: list[RunningJob], free: dict[str, int] | None = None,
           sizes: dict[str, int] | None = None, leaves: dict[str, str] | None = None,
           ) -> dict[str, NodeSlot]:
    """Each node the running jobs name, as big as what they hold there (or ``sizes``),
    plus one idle node per type of ``free``, with that many GPUs."""
    specs: dict[str, NodeSpec] = {}
    held: dict[str, int] = {}
    for r in running:
        for n in r.nodes:
            held[n] = held.get(n, 0) + r.gpus // len(r.nodes)
            if r.gpu_type is not None:
                specs[n] = NodeSpec(n, r.gpu_type, "leaf1", 0)
    for t, k in (free or {}).items():
        if k > 0:
            specs[f"idle-{t}"] = NodeSpec(f"idle-{t}", t, "leaf1", k)
    specs = {n: replace(s, gpus=(sizes or {}).get(n, s.gpus or held.get(n, 0)),
                        leaf=(leaves or {}).get(n, s.leaf)) for n, s in specs.items()}
    return node_slots(specs.values(), running)


def plan(running: list[RunningJob] | None = None, waiting: list[WaitingJob] | None = None,
         pos_map: dict[str, AllocationPosition] | None = None, *,
         ledger: PreemptionLedger = EMPTY, free: dict[str, int] | None = None,
         total: int = BIG, cfg: ContractsConfig = CFG, now: int = NOW,
         nodes: dict[str, NodeSlot] | None = None) -> list[Requeue]:
    running = BASE_RUNNING if running is None else running
    return plan_requeues(now, running, [wait()] if waiting is None else waiting,
                         positions(NLP, VISION) if pos_map is None else pos_map, ledger,
                         layout(running, free) if nodes is None else nodes, total, cfg)


# --------------------------------------------------------------------------- starved


STARVED = [
    ("resources", wait(), None, None, True),
    ("priority", wait(reason="Priority"), None, None, True),
    # nodes down, drained or reserved: freeing GPUs elsewhere does not start it
    ("req-node-not-avail-with-nodes",
     wait(reason="ReqNodeNotAvail, UnavailableNodes:gpu[01-02]"), None, None, False),
    ("long-form-nodes-required",
     wait(reason="Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_"
                 "priority_partitions"), None, None, False),
    ("maintenance-reservation-is-not-starvation",
     wait(reason="ReqNodeNotAvail, Reserved for maintenance"), None, None, False),
    ("dependency", wait(reason="Dependency"), None, None, False),
    ("held-by-user", wait(reason="JobHeldUser"), None, None, False),
    ("held-by-admin", wait(reason="JobHeldAdmin"), None, None, False),
    ("begin-time", wait(reason="BeginTime"), None, None, False),
    ("association-limit", wait(reason="AssocGrpGRES"), None, None, False),
    ("qos-limit", wait(reason="QOSMaxGRESPerUser"), None, None, False),
    ("not-yet-evaluated", wait(reason="None"), None, None, False),
    ("waited-too-little", wait(waited=299), None, None, False),
    ("waited-exactly-long-enough", wait(waited=300), None, None, True),
    ("free-qos-is-preempted-natively", wait(qos=FREE_QOS), None, None, False),
    ("no-gpus", wait(gpus=0), None, None, False),
    ("fits-in-the-free-gpus", wait(), None, {"a100": 8}, False),
    ("fits-in-free-gpus-of-another-type-it-accepts", wait(), None, {"a100": 0, "h100": 8},
     False),
    ("free-gpus-of-a-type-it-refuses", wait(types=frozenset({"a100"})), None,
     {"a100": 0, "h100": 8}, True),
    ("free-gpus-cover-part-of-the-need", wait(), None, {"a100": 4}, True),
    ("its-allocation-is-served", wait(), positions(NLP, pos("vision", 0.5, 1.0, 0.0)), None,
     False),
    ("nothing-owed-but-a-budget-counts-as-under-served", wait(),
     positions(NLP, pos("vision", 0.5, None, 0.0)), None, True),
    ("nothing-owed-and-no-budget", wait(), positions(NLP, pos("vision", 0.0, None, 0.0)),
     None, False),
    ("no-budget-position", wait(account="ghost"), None, None, False),
]


@pytest.mark.parametrize(("job", "pos_map", "free", "requeued"), [c[1:] for c in STARVED],
                         ids=[c[0] for c in STARVED])
def test_only_starved_jobs_trigger_a_requeue(job: WaitingJob,
                                             pos_map: dict[str, AllocationPosition] | None,
                                             free: dict[str, int] | None,
                                             requeued: bool) -> None:
    out = plan(waiting=[job], pos_map=pos_map, free=free)

    assert bool(out) is requeued


@pytest.mark.parametrize(("reason", "starving"), [
    ("Resources", True), (" Priority ", True), ("ReqNodeNotAvail", False),
    ("Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
     "partitions", False),
    ("ReqNodeNotAvail, Reserved for maintenance", False), ("Reservation", False),
    ("Licenses", False), ("PartitionDown", False), ("", False),
], ids=["resources", "padded", "req-node", "spaced-long-form", "maintenance", "reservation",
        "licenses", "partition-down", "empty"])
def test_the_starving_reason_allow_list(reason: str, starving: bool) -> None:
    assert starving_reason(reason) is starving


# --------------------------------------------------------------------------- victims


VICTIMS = [
    ("eligible", run(9), None, EMPTY, True),
    ("non-resumable-never", run(9, requeue=False), None, EMPTY, False),
    ("non-resumable-even-after-days", run(9, requeue=False, ran=240 * H), None, EMPTY, False),
    ("interactive-session", run(9, batch=False), None, EMPTY, False),
    ("free-qos-is-slurms-job", run(9, qos=FREE_QOS), None, EMPTY, False),
    ("inside-its-time-min", run(9, ran=H - 1), None, EMPTY, False),
    ("exactly-its-time-min", run(9, ran=H), None, EMPTY, True),
    ("time-min-zero", run(9, ran=60, time_min=0), None, EMPTY, True),
    ("unknown-time-min-protected-by-the-cap", run(9, ran=8 * H - 1, time_min=None), None,
     EMPTY, False),
    ("unknown-time-min-after-the-cap", run(9, ran=8 * H, time_min=None), None, EMPTY, True),
    ("time-min-above-the-cap-is-capped", run(9, ran=8 * H, time_min=12 * H), None, EMPTY,
     True),
    ("requeued-within-the-cooldown", run(9), None,
     PreemptionLedger({9: NOW - H + 1}, ()), False),
    ("cooldown-over", run(9), None, PreemptionLedger({9: NOW - H}, ()), True),
    ("other-jobs-cooldown-does-not-count", run(9), None,
     PreemptionLedger({8: NOW - 60}, ()), True),
    ("gpu-type-it-does-not-accept", run(9, gpu_type="v100"), None, EMPTY, False),
    ("unknown-gpu-type", run(9, gpu_type=None), None, EMPTY, False),
    ("victim-not-over-served", run(9), positions(pos("nlp", 0.5, 1.0, 24.0), VISION), EMPTY,
     False),
    ("victim-owed-nothing", run(9), positions(pos("nlp", 0.5, None, 24.0), VISION), EMPTY,
     False),
    ("gap-below-the-minimum", run(9),
     positions(pos("nlp", 0.5, 1.1, 24.0), pos("vision", 0.5, 0.95, 0.0)), EMPTY, False),
    ("gap-exactly-the-minimum", run(9),
     positions(pos("nlp", 0.5, 1.15, 24.0), pos("vision", 0.5, 0.95, 0.0)), EMPTY, True),
    ("swap-would-leave-the-preemptor-above-the-victim", run(9),
     positions(pos("nlp", 0.5, 1.31, 8.0), VISION), EMPTY, False),
    ("swap-leaving-them-equal-is-allowed", run(9),
     positions(pos("nlp", 0.5, 1.31, 16.0), VISION), EMPTY, True),
    ("victim-without-a-position", run(9, account="ghost"), None, EMPTY, False),
]


@pytest.mark.parametrize(("victim", "pos_map", "ledger", "requeued"), [c[1:] for c in VICTIMS],
                         ids=[c[0] for c in VICTIMS])
def test_victim_rules(victim: RunningJob, pos_map: dict[str, AllocationPosition] | None,
                      ledger: PreemptionLedger, requeued: bool) -> None:
    job = wait(types=frozenset({"a100"}))

    out = plan([victim], [job], pos_map, ledger=ledger)

    assert [r.victim for r in out] == ([9] if requeued else [])
    pmap = positions(NLP, VISION) if pos_map is None else pos_map
    blocker = victim_blocker(NOW, victim, job, positions=pmap, ledger=ledger, cfg=CFG)
    assert (blocker is None) is requeued


# --------------------------------------------------------------------------- loop-free


LOOP = [
    # name, preemptor, need, victim, victim billing, allowed
    ("preemptor-ends-below", pos("p", 0.5, 0.4, 0.0), 8.0, pos("v", 0.5, 1.3, 24.0), 8.0,
     True),
    ("preemptor-ends-equal", pos("p", 0.5, 0.4, 0.0), 8.0, pos("v", 0.5, 1.3, 16.0), 8.0, True),
    ("preemptor-ends-above", pos("p", 0.5, 0.4, 0.0), 8.0, pos("v", 0.5, 1.3, 8.0), 8.0, False),
    ("weights-matter-small-budget-victim", pos("p", 0.7, 0.4, 14.0), 8.0,
     pos("v", 0.3, 1.3, 12.0), 4.0, False),  # 22/0.7 = 31.4 > 8/0.3 = 26.7
    ("weights-matter-big-budget-preemptor", pos("p", 0.7, 0.4, 7.0), 7.0,
     pos("v", 0.3, 1.3, 12.0), 4.0, True),   # 14/0.7 = 20 <= 8/0.3 = 26.7
    ("reverse-of-an-allowed-swap", pos("v", 0.5, 1.3, 16.0), 8.0, pos("p", 0.5, 0.4, 8.0),
     8.0, False),
    ("preemptor-without-budget", pos("p", 0.0, None, 0.0), 1.0, pos("v", 0.5, 1.3, 24.0), 8.0,
     False),
    ("victim-without-budget", pos("p", 0.5, 0.4, 0.0), 1.0, pos("v", 0.0, None, 24.0), 8.0,
     False),
]


@pytest.mark.parametrize(("preemptor", "need", "victim", "billing", "allowed"),
                         [c[1:] for c in LOOP], ids=[c[0] for c in LOOP])
def test_loop_free_rule(preemptor: AllocationPosition, need: float, victim: AllocationPosition,
                        billing: float, allowed: bool) -> None:
    assert loop_free(preemptor, need, victim, billing) is allowed


@pytest.mark.parametrize(("run_p", "run_v", "need", "billing"), [
    (0.0, 24.0, 8.0, 8.0), (0.0, 16.0, 8.0, 8.0), (4.0, 40.0, 2.0, 16.0), (0.0, 9.0, 1.0, 1.0),
], ids=["clear-win", "exactly-equal-after", "uneven-jobs", "single-gpu"])
def test_an_allowed_swap_can_never_be_reversed(run_p: float, run_v: float, need: float,
                                               billing: float) -> None:
    p, v = pos("p", 0.5, 0.4, run_p), pos("v", 0.5, 1.3, run_v)
    assert loop_free(p, need, v, billing)

    p_after = replace(p, running_billing_gpus=run_p + need)
    v_after = replace(v, running_billing_gpus=run_v - billing)
    # whatever the smallest job either could ask for or give back
    for back_need in (need, billing, 0.5):
        for back_billing in (need, billing, 0.5):
            assert not loop_free(v_after, back_need, p_after, back_billing)


# --------------------------------------------------------------------------- choosing


def test_the_most_over_served_allocation_goes_first() -> None:
    out = plan([run(1, "nlp"), run(2, "speech")], [wait()],
               positions(NLP, VISION, pos("speech", 0.5, 2.0, 24.0)))

    assert [(r.victim, r.victim_account) for r in out] == [(2, "speech")]


def test_the_youngest_job_goes_first() -> None:
    out = plan([run(1, ran=10 * H), run(2, ran=9 * H), run(3, ran=12 * H)], [wait()])

    assert [r.victim for r in out] == [2]


@pytest.mark.parametrize(("on_n1", "victims"), [
    ([1, 2], [2, 1]), ([2], [2]),
], ids=["two-needed", "free-gpus-on-the-node-count"])
def test_victims_are_taken_until_the_node_is_complete(on_n1: list[int],
                                                      victims: list[int]) -> None:
    # n1 has 8 GPUs: jobs 1 and 2 hold 4 each, or job 2 holds 4 and 4 are free; job 3
    # holds 4 of n2, whose other 4 GPUs job 4 (not resumable) holds
    running = [run(j, gpus=4, ran=(11 - j) * H) for j in on_n1]
    running = [replace(r, nodes=("n1",)) for r in running]
    running += [replace(run(3, gpus=4, ran=8 * H), nodes=("n2",)),
                replace(run(4, gpus=4, requeue=False), nodes=("n2",))]

    out = plan(running, [wait(gpus=8)], nodes=layout(running, sizes={"n1": 8}))

    assert sorted(r.victim for r in out) == sorted(victims)


def test_nothing_happens_unless_the_need_is_fully_covered() -> None:
    running = [run(1, gpus=4), run(2, gpus=4, requeue=False)]

    assert plan(running, [wait(gpus=8)]) == []


def test_victims_come_from_one_gpu_type() -> None:
    running = [run(1, gpus=4, gpu_type="a100"), run(2, gpus=4, gpu_type="h100")]

    assert plan(running, [wait(gpus=8)], free={"a100": 0, "h100": 0}) == []


def test_the_placement_losing_the_fewest_gpu_hours_wins_across_types() -> None:
    # a100 node n1: job 1, 8 GPUs for 9 h (72 GPU-h); h100 node h1: job 2, 4 GPUs for
    # 10 h (40 GPU-h) and 4 GPUs free
    running = [run(1, gpus=8, gpu_type="a100", ran=9 * H),
               replace(run(2, gpus=4, gpu_type="h100", ran=10 * H), nodes=("h1",))]

    out = plan(running, [wait(gpus=8)], nodes=layout(running, sizes={"h1": 8}))

    assert [(r.victim, r.details["gpu_type"], r.details["nodes"]) for r in out] == [
        (2, "h100", ["h1"])]
    assert out[0].details["lost_gpu_h"] == 40.0
    assert out[0].details["free_gpus_before"] == 4


def test_a_victim_that_breaks_the_loop_free_rule_is_skipped_for_a_smaller_one() -> None:
    # vision runs 2 and needs 2 more: it ends at 4/0.5 = 8. Requeuing nlp's younger 16-GPU
    # job would leave nlp at 2/0.5 = 4, below that; the older 2-GPU job leaves it at 32.
    running = [run(1, gpus=16, ran=9 * H), run(2, gpus=2, ran=10 * H)]
    pmap = positions(pos("nlp", 0.5, 1.31, 18.0), pos("vision", 0.5, 0.42, 2.0))

    out = plan(running, [wait(gpus=2)], pmap)

    assert [r.victim for r in out] == [2]


def test_shares_are_updated_as_the_plan_goes() -> None:
    # nlp 32 on half the budget; each vision job needs 8. After two swaps both sit at 32;
    # a third would leave vision (48) above nlp (16).
    running = [run(i, ran=(8 + i) * H) for i in range(1, 5)]
    waiting = [wait(100 + i, order=i) for i in range(3)]
    pmap = positions(pos("nlp", 0.5, 1.31, 32.0), VISION)

    out = plan(running, waiting, pmap)

    assert [(r.victim, r.for_job) for r in out] == [(1, 100), (2, 101)]
    assert out[1].details["for_share_before"] == 16.0
    assert out[1].details["for_share_after"] == 32.0
    assert out[1].details["victim_share_after"] == 32.0


def test_a_victim_is_never_taken_twice_in_one_plan() -> None:
    out = plan([run(1)], [wait(100, order=0), wait(101, order=1)])

    assert [r.for_job for r in out] == [100]


def test_starved_jobs_are_served_in_scheduling_order() -> None:
    waiting = [wait(100, order=1), wait(101, order=0)]

    out = plan([run(1)], waiting)

    assert [r.for_job for r in out] == [101]
    # in_order: the list's own order is the queue's, whatever ``order`` says
    given = [replace(w, order=-1) for w in (waiting[1], waiting[0])]
    assert plan_requeues(NOW, [run(1)], given, positions(NLP, VISION), EMPTY,
                         layout([run(1)]), BIG, CFG, in_order=True) == out
    assert [r.for_job for r in plan_requeues(
        NOW, [run(1)], given[::-1], positions(NLP, VISION), EMPTY, layout([run(1)]), BIG,
        CFG, in_order=True)] == [100]


def test_freed_gpus_beyond_the_need_stay_free_for_the_next_job() -> None:
    # one 8-GPU victim frees enough for two 4-GPU jobs: the second needs no new victim
    out = plan([run(1), run(2, ran=11 * H)], [wait(100, gpus=4), wait(101, gpus=4, order=1)])

    assert [(r.victim, r.for_job) for r in out] == [(1, 100)]


# --------------------------------------------------------------------------- budget


@pytest.mark.parametrize(("total", "cap"), [(1000, 50), (160, 8), (40, 2), (39, 1), (19, 0),
                                            (0, 0)],
                         ids=["large", "160-gpus", "40-gpus-gets-2", "39-rounds-down",
                              "under-20-never", "empty"])
def test_the_cluster_cap_is_a_floor_of_the_fraction(total: int, cap: int) -> None:
    assert preemption_cap(total, CFG) == cap
    assert preemption_budget_left(NOW, EMPTY, total, CFG) == cap


BUDGET = [
    ("nothing-recent", [], 8),
    ("a-requeue-in-the-window", [(NOW - 60, 4)], 4),
    ("just-inside-the-window", [(NOW - 599, 4)], 4),
    ("window-expired", [(NOW - 600, 4)], 8),
    ("several", [(NOW - 10, 2), (NOW - 300, 2), (NOW - 9000, 8)], 4),
    ("never-negative", [(NOW - 10, 16)], 0),
]


@pytest.mark.parametrize(("recent", "left"), [c[1:] for c in BUDGET], ids=[c[0] for c in BUDGET])
def test_budget_left_counts_requeues_in_the_window(recent: list[tuple[int, int]],
                                                   left: int) -> None:
    ledger = PreemptionLedger(last_requeue={}, recent=recent)

    assert preemption_budget_left(NOW, ledger, 160, CFG) == left


PLAN_BUDGET = [
    ("fits-the-cap", 160, [], True),
    ("would-exceed-the-cap", 140, [], False),  # cap 7 < 8
    ("cap-used-up-recently", 160, [(NOW - 60, 1)], False),
    ("cap-used-but-window-expired", 160, [(NOW - 600, 8)], True),
    ("40-gpu-cluster-cannot-swap-8", 40, [], False),
]


@pytest.mark.parametrize(("total", "recent", "requeued"), [c[1:] for c in PLAN_BUDGET],
                         ids=[c[0] for c in PLAN_BUDGET])
def test_a_plan_over_the_budget_is_not_made(total: int, recent: list[tuple[int, int]],
                                            requeued: bool) -> None:
    out = plan(ledger=PreemptionLedger({}, recent), total=total)

    assert bool(out) is requeued


def test_a_job_over_the_budget_is_skipped_and_a_smaller_one_served() -> None:
    running = [run(1, gpus=8, ran=9 * H), run(2, gpus=2, ran=10 * H)]
    waiting = [wait(100, gpus=8, order=0), wait(101, gpus=2, order=1)]

    out = plan(running, waiting, total=60)  # cap 3

    assert [(r.victim, r.for_job) for r in out] == [(2, 101)]


def test_the_plan_within_one_call_counts_against_the_cap() -> None:
    running = [run(i, gpus=4, ran=(8 + i) * H) for i in range(1, 4)]
    waiting = [wait(100 + i, gpus=4, order=i) for i in range(3)]

    out = plan(running, waiting, total=160)  # cap 8 -> two 4-GPU swaps

    assert len(out) == 2
    assert sum(r.gpus for r in out) == 8


# --------------------------------------------------------------------------- reasons


def test_each_requeue_says_why_in_one_sentence() -> None:
    out = plan([run(7, time_min=H)], [wait(123)])

    assert len(out) == 1
    rq = out[0]
    assert rq.reason == ("requeued after its 60-min minimum runtime so that job 123 of vision "
                         "(delivered/owed 0.42) can start; nlp is over-served "
                         "(delivered/owed 1.31)")
    assert (rq.victim, rq.for_job, rq.victim_account, rq.for_account, rq.gpus) == \
        (7, 123, "nlp", "vision", 8)
    assert rq.details["waited_s"] == H
    assert rq.details["ran_s"] == 10 * H
    assert rq.details["victim_share_before"] == 48.0
    assert rq.details["victim_share_after"] == 32.0
    assert rq.details["for_share_after"] == 16.0
    json.dumps(rq.details, allow_nan=False)


@pytest.mark.parametrize(("victim", "pmap", "fragment"), [
    (run(7, time_min=None, ran=9 * H), None, "after 480 min (the cap: slurm-ml has no record of its protection)"),
    (run(7), positions(NLP, pos("vision", 0.5, None, 0.0)), "of vision (nothing owed yet)"),
], ids=["no-time-min", "nothing-owed"])
def test_reason_variants(victim: RunningJob, pmap: dict[str, AllocationPosition] | None,
                         fragment: str) -> None:
    out = plan([victim], [wait(123)], pmap)

    assert fragment in out[0].reason


# --------------------------------------------------------------------------- properties


@st.composite
def two_allocations(draw: st.DrawFn) -> tuple[list[RunningJob], list[WaitingJob],
                                               dict[str, AllocationPosition], int]:
    """Two allocations P (under-served) and V (over-served) on one GPU type; or, with an
    entitlement (``reclaim_entitlement``: P may reclaim from V while below its own and V
    above), any ratios at all."""
    w_p = draw(st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.7, 0.9]))
    w_v = draw(st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.7, 0.9]))
    cap = draw(st.one_of(st.none(), st.sampled_from([8.0, 24.0, 64.0])))
    if cap is None:
        ratio_p = draw(st.floats(0.0, 0.79))
        ratio_v = draw(st.floats(max(1.01, ratio_p + 0.2), 3.0))
    else:
        ratio_p, ratio_v = draw(st.floats(0.0, 3.0)), draw(st.floats(0.0, 3.0))
    sizes = st.sampled_from([1, 2, 4, 8])
    weight = st.sampled_from([0.5, 1.0, 2.0])
    running: list[RunningJob] = []
    for i, account in enumerate(["V"] * draw(st.integers(0, 8)) + ["P"] * draw(
            st.integers(0, 4))):
        g = draw(sizes)
        running.append(run(i + 1, account, gpus=g, billing=g * draw(weight),
                           ran=draw(st.integers(0, 20)) * H,
                           time_min=draw(st.sampled_from([None, 0, H, 4 * H])),
                           requeue=draw(st.booleans())))
    waiting = []
    for i in range(draw(st.integers(1, 4))):
        g = draw(sizes)
        waiting.append(wait(100 + i, "P", gpus=g, billing=g * draw(weight), order=i))
    pos_map = {
        "P": replace(pos("P", w_p, ratio_p,
                         sum(r.billing_gpus for r in running if r.account == "P")),
                     entitled_billing_gpus=None if cap is None else w_p * cap),
        "V": replace(pos("V", w_v, ratio_v,
                         sum(r.billing_gpus for r in running if r.account == "V")),
                     entitled_billing_gpus=None if cap is None else w_v * cap),
    }
    return running, waiting, pos_map, draw(st.integers(0, 4))


@settings(max_examples=200, deadline=None)
@given(two_allocations(), st.floats(0.0, 3.0), st.floats(0.0, 3.0))
def test_two_allocations_never_requeue_each_other_back(
        scenario: tuple[list[RunningJob], list[WaitingJob], dict[str, AllocationPosition], int],
        new_ratio_p: float, new_ratio_v: float) -> None:
    running, waiting, pos_map, free = scenario
    first = plan(running, waiting, pos_map, free={"a100": free})

    # Apply it: victims leave, the jobs they were requeued for start, victims wait again.
    victims = {r.victim for r in first}
    started = {r.for_job for r in first}
    by_id = {w.job_id: w for w in waiting}
    later = NOW + 24 * H  # every minimum runtime and cooldown has passed
    running2 = [r for r in running if r.job_id not in victims]
    running2 += [running_job(j, start=NOW, name="x", account="P", user="v", gpus=by_id[j].gpus,
                             billing_gpus=by_id[j].billing_gpus, nodes=("n",), time_min_s=0)
                 for j in started]
    old = {r.job_id: r for r in running}
    waiting2 = [replace(wait(r.victim, "V", gpus=r.gpus, billing=old[r.victim].billing_gpus),
                        submit=later - H, order=i) for i, r in enumerate(first)]
    run_p = sum(r.billing_gpus for r in running2 if r.account == "P")
    run_v = sum(r.billing_gpus for r in running2 if r.account == "V")
    # Adversarial ratios: the window may have moved so far that V is now under-served.
    pos2 = {"P": replace(pos_map["P"], ratio=new_ratio_p, running_billing_gpus=run_p),
            "V": replace(pos_map["V"], ratio=new_ratio_v, running_billing_gpus=run_v)}
    freed = sum(r.gpus for r in first)
    need = sum(by_id[j].gpus for j in started)
    second = plan(running2, waiting2, pos2, free={"a100": max(0, free + freed - need)},
                  now=later)

    assert all(r.victim_account == "V" and r.for_account == "P" for r in first)
    assert not [r for r in second if r.victim_account == "P" and r.for_account == "V"]
    if first:  # and the share rule alone forbids every reverse swap
        for r in running2:
            if r.account == "P":
                for w in waiting2:
                    assert not loop_free(pos2["V"], w.billing_gpus, pos2["P"], r.billing_gpus)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[RunningJob], list[WaitingJob],
                                       dict[str, AllocationPosition], PreemptionLedger, int]:
    accounts = ["a", "b", "c", "d"]
    cap = draw(st.one_of(st.none(), st.sampled_from([16.0, 48.0])))  # None: no entitlement
    pos_map = {}
    for a in accounts:
        share = draw(st.sampled_from([0.1, 0.2, 0.3, 0.4]))
        pos_map[a] = replace(pos(a, share, draw(st.one_of(st.none(), st.floats(0.0, 3.0))), 0.0),
                             entitled_billing_gpus=None if cap is None else share * cap)
    running = []
    for i in range(draw(st.integers(0, 12))):
        g = draw(st.sampled_from([1, 2, 4, 8]))
        running.append(run(i + 1, draw(st.sampled_from(accounts)), gpus=g,
                           gpu_type=draw(st.sampled_from(["a100", "h100"])),
                           ran=draw(st.integers(0, 12 * H)),
                           time_min=draw(st.sampled_from([None, 0, H, 4 * H])),
                           requeue=draw(st.booleans()), batch=draw(st.booleans()),
                           qos=draw(st.sampled_from([ALLOC_QOS, ALLOC_QOS, FREE_QOS]))))
    for a in accounts:
        load = sum(r.billing_gpus for r in running if r.account == a and r.qos == ALLOC_QOS)
        pos_map[a] = replace(pos_map[a], running_billing_gpus=load)
    waiting = [wait(100 + i, draw(st.sampled_from(accounts)),
                    gpus=draw(st.sampled_from([1, 2, 4, 8])),
                    types=draw(st.sampled_from([frozenset(), frozenset({"a100"}),
                                                frozenset({"h100"})])),
                    waited=draw(st.integers(0, 2 * H)), order=i)
               for i in range(draw(st.integers(0, 6)))]
    ledger = PreemptionLedger(
        last_requeue={r.job_id: NOW - draw(st.integers(0, 2 * H)) for r in running
                      if draw(st.booleans())},
        recent=[(NOW - draw(st.integers(0, 1200)), draw(st.integers(1, 8)))
                for _ in range(draw(st.integers(0, 3)))])
    return running, waiting, pos_map, ledger, draw(st.integers(0, 400))


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_every_requeue_keeps_the_contract(
        scenario: tuple[list[RunningJob], list[WaitingJob], dict[str, AllocationPosition],
                        PreemptionLedger, int]) -> None:
    running, waiting, pos_map, ledger, total = scenario
    out = plan(running, waiting, pos_map, ledger=ledger, free={"a100": 0, "h100": 1},
               total=total)

    by_id = {r.job_id: r for r in running}
    assert len({r.victim for r in out}) == len(out)
    assert sum(r.gpus for r in out) <= preemption_budget_left(NOW, ledger, total, CFG)
    for rq in out:
        victim = by_id[rq.victim]
        assert victim.requeue and victim.batch and victim.qos == ALLOC_QOS
        limit = 8 * H if victim.time_min_s is None else min(victim.time_min_s, 8 * H)
        assert victim.ran_s(NOW) >= limit
        assert NOW - ledger.last_requeue.get(victim.job_id, NOW - 10 * H) >= H
        vpos, ppos = pos_map[rq.victim_account], pos_map[rq.for_account]
        over_served = vpos.ratio is not None and vpos.ratio > 1
        # reclaim: the preemptor below its entitlement, the victim above its own, and
        # still at or above it without this job (only borrowed GPUs are reclaimed)
        assert over_served or reclaims(ppos, vpos, CFG, victim.billing_gpus)
        if rq.details["basis"] == "entitlement":
            assert reclaims(ppos, vpos, CFG, victim.billing_gpus)


def test_float_noise_around_one_is_neither_over_nor_under_served() -> None:
    from slurm_ml.policy.contracts import AllocationPosition, is_starved, plan_requeues

    noisy_over = AllocationPosition(account="a", budget_share=0.5, ratio=1.0000000000000002,
                                    running_billing_gpus=8.0)
    noisy_under = AllocationPosition(account="b", budget_share=0.5, ratio=0.9999999999999998,
                                     running_billing_gpus=0.0)
    job = waiting_job(9, submit=0, account="b", user="u")
    cfg = ContractsConfig(preempt_after_wait_s=0, preempt_min_gap=0.0, preempt_cap_fraction=1.0)
    assert not is_starved(10_000, job, noisy_under, {}, cfg)
    victim = running_job(1, start=0, name="j", account="a", user="v", time_min_s=60)
    under = replace(noisy_under, ratio=0.2)
    plans = plan_requeues(10_000, [victim], [job], {"a": noisy_over, "b": under},
                          PreemptionLedger(last_requeue={}, recent=[]), {}, 16, cfg)
    assert plans == []  # "a" is served, not over-served: nothing is taken from it


@settings(max_examples=100, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_in_order_plans_what_the_sorted_queue_plans(
        scenario: tuple[list[RunningJob], list[WaitingJob], dict[str, AllocationPosition],
                        PreemptionLedger, int], rnd: random.Random) -> None:
    """``in_order=True`` (the simulator's starved jobs, already in queue order, their
    ``order`` not their place) plans exactly what the sort by ``order`` plans."""
    running, waiting, pos_map, ledger, total = scenario
    places = rnd.sample(range(len(waiting)), len(waiting))  # a queue order not by job id
    waiting = [replace(w, order=place) for w, place in zip(waiting, places, strict=True)]
    nodes = layout(running, {"a100": 0, "h100": 1})
    shuffled = rnd.sample(waiting, len(waiting))
    want = plan_requeues(NOW, running, shuffled, pos_map, ledger, nodes, total, CFG)
    in_order = [replace(w, order=-1) for w in sorted(waiting, key=lambda w: w.order)]
    assert plan_requeues(NOW, running, in_order, pos_map, ledger, nodes, total, CFG,
                         in_order=True) == want


# --------------------------------------------------------------------------- reclaim


def ent(p: AllocationPosition, entitled: float | None) -> AllocationPosition:
    return replace(p, entitled_billing_gpus=entitled)


# nlp over its entitlement now (24 of 16) but not over-served in the window (0.95);
# vision below its own (0 of 16) and not under-served (1.1): window ratios alone forbid.
NLP_BORROWS = ent(pos("nlp", 0.5, 0.95, 24.0), 16.0)
VISION_SHORT = ent(pos("vision", 0.5, 1.1, 0.0), 16.0)


def test_a_job_below_its_entitlement_reclaims_whatever_the_window_ratios() -> None:
    pmap = positions(NLP_BORROWS, VISION_SHORT)
    window_only = replace(CFG, reclaim_entitlement=False)

    assert plan(pos_map=pmap, cfg=window_only) == []
    out = plan(pos_map=pmap)
    assert [r.victim for r in out] == [1]  # the youngest past its protection
    assert out[0].details["basis"] == "entitlement"
    assert out[0].reason == (
        "requeued after its 60-min minimum runtime so that job 123 of vision can start: "
        "vision runs 0.0 of its 16.0 entitled billing GPUs, nlp runs 24.0, above its 16.0")


@pytest.mark.parametrize(("victim", "preemptor", "allowed"), [
    (NLP_BORROWS, VISION_SHORT, True),  # 24 - 8 = 16: nlp keeps its entitlement
    (ent(NLP_BORROWS, 20.0), VISION_SHORT, False),  # 24 - 8 < 20: below it after: no
    (ent(NLP_BORROWS, 24.0), VISION_SHORT, False),  # nlp at its entitlement: not above
    (NLP_BORROWS, ent(VISION_SHORT, 0.0), False),  # vision at its own: not below
    (ent(NLP_BORROWS, None), VISION_SHORT, False),  # unknown entitlement: neither
    (NLP_BORROWS, ent(VISION_SHORT, None), False),
])
def test_reclaim_needs_the_preemptor_below_and_the_victim_above(
        victim: AllocationPosition, preemptor: AllocationPosition, allowed: bool) -> None:
    pmap = positions(victim, preemptor)
    assert reclaims(preemptor, victim, CFG, run(1).billing_gpus) is allowed
    assert (victim_blocker(NOW, run(1), wait(), positions=pmap, ledger=EMPTY, cfg=CFG)
            is None) is allowed


@pytest.mark.parametrize(("victim", "reason"), [
    (run(1, ran=10 * 60), "inside its protected minimum runtime"),
    (run(1, requeue=False), "not resumable (submitted with --no-requeue)"),
    (run(1, batch=False), "interactive session"),
])
def test_reclaim_keeps_every_other_guard(victim: RunningJob, reason: str) -> None:
    pmap = positions(NLP_BORROWS, VISION_SHORT)
    assert victim_blocker(NOW, victim, wait(), positions=pmap, ledger=EMPTY, cfg=CFG) == reason


def test_reclaim_keeps_the_loop_free_rule() -> None:
    """vision would run 8 + 8 = 16 billing GPUs on 0.25 of the budget (share 64), nlp
    24 - 8 = 16 on 0.5 (share 32): the swap would put vision above nlp."""
    pmap = positions(ent(pos("nlp", 0.5, 0.95, 24.0), 16.0),
                     ent(pos("vision", 0.25, 1.1, 8.0), 9.0))
    assert victim_blocker(NOW, run(1), wait(), positions=pmap, ledger=EMPTY, cfg=CFG) == (
        "the waiting allocation would end above the victim's share (loop-free rule)")


def test_a_job_at_its_entitlement_is_not_starved_by_reclaim() -> None:
    """vision runs its whole entitlement and is not under-served: nothing to reclaim."""
    pmap = positions(NLP_BORROWS, ent(pos("vision", 0.5, 1.1, 16.0), 16.0))
    assert plan(pos_map=pmap) == []


def test_an_over_served_allocation_below_its_entitlement_does_not_use_the_window_rule() -> None:
    """a (ratio 1.10) is below its entitlement, so its job is starved; b (1.35) is
    over-served. The window rule needs an under-served preemptor, so it does not apply;
    the reclaim does not either: at its entitlement b borrows nothing (a review's case:
    b's job was requeued by the window rule, taking b below its entitlement), and with
    no known entitlement nothing of b's is borrowed."""
    a = ent(pos("vision", 0.5, 1.10, 0.0), 8.0)
    running = [run(1, gpus=4), run(2, gpus=4)]
    for b in (ent(pos("nlp", 0.5, 1.35, 8.0), 8.0), pos("nlp", 0.5, 1.35, 8.0)):
        assert plan(running, [wait(gpus=4)], positions(a, b)) == [], b
    assert victim_blocker(NOW, running[0], wait(gpus=4), ledger=EMPTY, cfg=CFG,
                          positions=positions(a, pos("nlp", 0.5, 1.35, 8.0))) == (
        "the waiting allocation is neither under-served nor, with this victim, reclaiming "
        "GPUs borrowed beyond an entitlement")


def test_no_requeue_takes_an_allocation_below_its_entitlement() -> None:
    """vision (under-served, 0.4) may requeue by the window rule, but nlp (1.3) runs only
    4 billing GPUs above its 16: one 8-GPU job would take it below, so none goes; with
    the reclaim off the window rule alone takes it."""
    nlp = ent(pos("nlp", 0.5, 1.3, 20.0), 16.0)
    vision = ent(pos("vision", 0.5, 0.4, 0.0), 16.0)
    running = [run(1, gpus=8), run(2, gpus=8), run(3, gpus=4)]
    assert [r.victim for r in plan(running, [wait(gpus=4)], positions(nlp, vision))] == [3]
    assert plan(running, [wait(gpus=8)], positions(nlp, vision)) == []
    window_only = replace(CFG, reclaim_entitlement=False)
    assert plan(running, [wait(gpus=8)], positions(nlp, vision), cfg=window_only) != []


def test_one_plan_never_takes_an_allocation_below_its_entitlement_across_jobs() -> None:
    """Two starved 4-GPU jobs; nlp borrows 4 billing GPUs (20 of 16): only the first is
    served from it."""
    nlp = ent(pos("nlp", 0.5, 1.3, 20.0), 16.0)
    vision = ent(pos("vision", 0.5, 0.4, 0.0), 16.0)
    running = [run(1, gpus=4), run(2, gpus=4), run(3, gpus=4), run(4, gpus=4), run(5, gpus=4)]
    out = plan(running, [wait(123, gpus=4, order=0), wait(124, gpus=4, order=1)],
               positions(nlp, vision))
    assert [r.for_job for r in out] == [123]


def test_positions_after_a_plan_move_the_victims_and_the_jobs_they_were_for() -> None:
    nlp = ent(pos("nlp", 0.5, 1.3, 28.0), 16.0)
    vision = ent(pos("vision", 0.5, 0.4, 0.0), 16.0)
    running = [run(1, gpus=4), run(2, gpus=4), run(3, gpus=4), run(4, gpus=8), run(5, gpus=8)]
    pmap = positions(nlp, vision)
    out = plan(running, [wait(123, gpus=8)], pmap)
    assert out
    after = after_requeues(pmap, out)
    taken = sum(r.gpus for r in out)
    assert after["nlp"].running_billing_gpus == 28.0 - taken
    assert after["vision"].running_billing_gpus == 8.0  # the job it was for, once
