"""Requeue only what makes room: node-level placement of a starved job (issue 16, item 3).

Before, requeue planning counted free GPUs over the whole cluster: with 4 + 3 + 0 free
on three nodes it requeued a job for an 8-GPU single-node job that still could not
start, and with 4 + 4 free it never saw that job as starved at all.
"""

from __future__ import annotations

from dataclasses import replace

from builders import running_job, waiting_job
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.config import ContractsConfig
from slurm_ml.model import ALLOC_QOS, FREE_QOS, Node
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.contracts import (
    AllocationPosition,
    PreemptionLedger,
    Requeue,
    is_starved,
    plan_requeues,
)
from slurm_ml.policy.placement import (
    NodeSlot,
    NodeSpec,
    Planner,
    cluster_nodes,
    fits_now,
    node_slots,
)

NOW = 1_800_000_000
H = 3600
CFG = ContractsConfig()  # 8 h cap, 1 h cooldown, gap 0.2, 300 s wait
EMPTY = PreemptionLedger(last_requeue={}, recent=())
POSITIONS = {"nlp": AllocationPosition("nlp", 0.5, 1.31, 64.0),
             "vision": AllocationPosition("vision", 0.5, 0.42, 0.0)}


def run(job_id: int, nodes: tuple[str, ...], gpus: int, *, ran: float = 10 * H,
        requeue: bool = True, qos: str = ALLOC_QOS, account: str = "nlp") -> RunningJob:
    return running_job(job_id, start=NOW - int(ran), account=account, gpus=gpus,
                       gpu_type="a100", billing_gpus=float(gpus), nodes=nodes,
                       time_min_s=H, requeue=requeue, qos=qos)


def wait(gpus: int = 8, job_id: int = 100, order: int = 0) -> WaitingJob:
    return waiting_job(job_id, submit=NOW - H, account="vision", gpus=gpus, order=order)


def spec(name: str, leaf: str = "leaf1", gpus: int = 8, usable: bool = True) -> NodeSpec:
    return NodeSpec(name=name, gpu_type="a100", leaf=leaf, gpus=gpus, usable=usable)


def plan(specs: list[NodeSpec], running: list[RunningJob], waiting: list[WaitingJob],
         total: int = 1000) -> list[Requeue]:
    return plan_requeues(NOW, running, waiting, POSITIONS, EMPTY, node_slots(specs, running),
                         total, CFG)


# --------------------------------------------------------------------------- the findings


def test_4_3_0_free_gpus_requeue_nothing_for_an_8_gpu_single_node_job() -> None:
    """Old code: 7 free < 8, short by 1, so it requeued job 3 (1 GPU on n3): no node then
    had 8 free. Now no node can be completed within the rules: nothing is requeued."""
    specs = [spec("n1"), spec("n2"), spec("n3")]
    running = [run(1, ("n1",), 4, requeue=False), run(2, ("n2",), 5, requeue=False),
               run(3, ("n3",), 1, ran=2 * H), run(4, ("n3",), 7, requeue=False)]
    slots = node_slots(specs, running)
    assert [slots[n].free for n in ("n1", "n2", "n3")] == [4, 3, 0]

    assert is_starved(NOW, wait(), POSITIONS["vision"], slots, CFG)
    assert plan(specs, running, [wait()]) == []


def test_4_4_free_gpus_leave_an_8_gpu_job_starved_and_one_victim_completes_a_node() -> None:
    """Old code: 8 free GPUs over the cluster, so never starved. They are on two nodes:
    the job is starved, and the victim that completes one node (the one losing fewer
    GPU-hours) is requeued, for that node."""
    specs = [spec("n1"), spec("n2")]
    running = [run(1, ("n1",), 4, ran=3 * H), run(2, ("n2",), 4, ran=2 * H)]
    slots = node_slots(specs, running)

    assert not fits_now(8, frozenset(), slots)
    assert is_starved(NOW, wait(), POSITIONS["vision"], slots, CFG)
    out = plan(specs, running, [wait()])
    assert [(r.victim, r.for_job, r.details["nodes"]) for r in out] == [(2, 100, ["n2"])]
    assert out[0].details["free_gpus_before"] == 4
    assert out[0].details["lost_gpu_h"] == 8.0


def test_a_gang_is_completed_under_one_leaf() -> None:
    """A 16-GPU job needs two whole 8-GPU nodes under one leaf. n1 (leaf1) is free; the
    cheapest victim, job 3 on n3, is under leaf2, whose other node nobody may requeue:
    old code (8 free, short by 8, youngest first) took job 3. Now n2's job 2, which
    completes leaf1, is requeued."""
    specs = [spec("n1", "leaf1"), spec("n2", "leaf1"), spec("n3", "leaf2"),
             spec("n4", "leaf2")]
    running = [run(2, ("n2",), 8, ran=3 * H), run(3, ("n3",), 8, ran=2 * H),
               run(4, ("n4",), 8, requeue=False)]

    out = plan(specs, running, [wait(16)])

    assert [(r.victim, r.details["nodes"]) for r in out] == [(2, ["n1", "n2"])]


def test_a_gang_that_fits_over_two_leaves_is_not_starved() -> None:
    """Slurm spreads it once the --switches wait ends: no requeue to save that wait."""
    specs = [spec("n1", "leaf1"), spec("n2", "leaf1"), spec("n3", "leaf2"),
             spec("n4", "leaf2")]
    running = [run(2, ("n2",), 8), run(4, ("n4",), 8)]

    assert fits_now(16, frozenset(), node_slots(specs, running))
    assert plan(specs, running, [wait(16)]) == []


def test_the_victims_losing_the_fewest_gpu_hours_are_chosen() -> None:
    """n1: job 1, 8 GPUs for 1 h (8 GPU-h, the youngest); n2: job 2, 2 GPUs for 2 h
    (4 GPU-h) with 6 free. Old code (6 free, short by 2, youngest first) took job 1."""
    specs = [spec("n1"), spec("n2")]
    running = [run(1, ("n1",), 8, ran=1 * H), run(2, ("n2",), 2, ran=2 * H)]

    out = plan(specs, running, [wait()])

    assert [(r.victim, r.details["nodes"], r.details["lost_gpu_h"]) for r in out] == [
        (2, ["n2"], 4.0)]


def test_on_one_node_two_small_victims_can_lose_less_than_one_big_one() -> None:
    """Need 4 on n1: one 4-GPU job for 3 h (12 GPU-h) or two 2-GPU jobs for 2 h and
    2.5 h (9 GPU-h): the two, though there are more of them."""
    specs = [spec("n1")]
    running = [run(1, ("n1",), 4, ran=3 * H), run(2, ("n1",), 2, ran=2 * H),
               run(3, ("n1",), 2, ran=2.5 * H)]

    out = plan(specs, running, [wait(4)])

    assert sorted(r.victim for r in out) == [2, 3]


# --------------------------------------------------------------------------- the room


def test_gpus_of_free_qos_jobs_are_room_for_an_allocated_job() -> None:
    """Slurm's preempt/qos requeues them itself: no contract requeue is needed."""
    specs = [spec("n1"), spec("n2")]
    running = [run(1, ("n1",), 4, qos=FREE_QOS), run(2, ("n1",), 4, ran=2 * H),
               run(3, ("n2",), 8, ran=1 * H)]

    slots = node_slots(specs, running)
    assert slots["n1"].free == 4 and slots["n1"].held == ((2, 4),)
    out = plan(specs, running, [wait()])
    assert [r.victim for r in out] == [2]  # 8 GPU-h; n2's job 3 would lose 8 too, more jobs


def test_a_drained_node_is_never_a_placement() -> None:
    specs = [spec("n1", usable=False), spec("n2")]
    running = [run(2, ("n2",), 8, ran=3 * H)]

    assert not fits_now(8, frozenset(), node_slots(specs, running))
    assert [r.details["nodes"] for r in plan(specs, running, [wait()])] == [["n2"]]
    # a drained node's idle GPUs are no room either: n1's job makes it
    specs = [spec("n1"), spec("n2", usable=False)]
    running = [run(1, ("n1",), 8)]
    assert not fits_now(8, frozenset(), node_slots(specs, running))
    assert [(r.victim, r.details["nodes"]) for r in plan(specs, running, [wait()])] == [
        (1, ["n1"])]


def test_a_node_too_small_for_the_job_is_never_cleared() -> None:
    specs = [spec("n1", gpus=4), spec("n2", gpus=4)]
    running = [run(1, ("n1",), 4), run(2, ("n2",), 4)]

    # 8 GPUs do not fit one 4-GPU node: a gang of two whole nodes, both cleared
    assert sorted(r.victim for r in plan(specs, running, [wait()])) == [1, 2]
    assert plan(specs, running, [wait(4)]) != []
    assert len(plan(specs, running, [wait(4)])) == 1


def test_the_room_made_for_one_job_is_seen_by_the_next() -> None:
    specs = [spec("n1"), spec("n2")]
    running = [run(1, ("n1",), 8, ran=2 * H), run(2, ("n2",), 8, ran=3 * H)]

    out = plan(specs, running, [wait(4, 100, 0), wait(4, 101, 1), wait(8, 102, 2)])

    # job 1 makes room for 100, and its 4 GPUs left over let 101 start: no requeue for
    # it; 102 needs all of a node, and job 1's is half taken now: job 2 makes room
    assert [(r.victim, r.for_job) for r in out] == [(1, 100), (2, 102)]


def test_no_placement_within_the_budget_means_no_requeue() -> None:
    specs = [spec("n1")]
    running = [run(1, ("n1",), 8)]

    assert plan(specs, running, [wait()], total=100) == []  # cap 5 < 8


def test_planner_commit_counts_the_started_job_as_holding_its_nodes() -> None:
    specs = [spec("n1", "leaf1"), spec("n2", "leaf1")]
    running = [run(1, ("n1",), 8)]
    planner = Planner(NOW, node_slots(specs, running), running)
    got = planner.best(16, frozenset(), can_take=lambda _v: True, set_ok=lambda _vs: True,
                       budget=100)
    assert got is not None and got.nodes == ("n1", "n2")
    planner.commit(got, 16)

    assert not planner.fits(8, frozenset())
    assert planner.best(8, frozenset(), can_take=lambda _v: True, set_ok=lambda _vs: True,
                        budget=100) is None


def test_the_daemon_view_of_nodes_uses_the_config_and_slurms_states() -> None:
    from daemon_helpers import nodes as config_nodes
    from test_sim_engine import cfg_with

    cfg = cfg_with([("big", "n[1-2]", "a100_80g", 8, "leafA"),
                    ("mid", "m[1-2]", "a100_40g", 4, "leafB")])
    seen = [replace(n, flags=frozenset({"DRAIN"})) if n.name == "n2" else
            replace(n, state="DOWN") if n.name == "m1" else n for n in config_nodes(cfg)]
    seen.append(Node("cpu1", "IDLE", frozenset(), "", (), "", 0, None, 8, 1000))

    got = {s.name: s for s in cluster_nodes(cfg, seen)}

    assert sorted(got) == ["m1", "m2", "n1", "n2"]
    assert (got["n1"].gpu_type, got["n1"].leaf, got["n1"].gpus, got["n1"].usable) == (
        "a100_80g", "leafA", 8, True)
    assert not got["n2"].usable and not got["m1"].usable and got["m2"].usable


def test_slots_ignore_jobs_on_unknown_nodes() -> None:
    slots: dict[str, NodeSlot] = node_slots([spec("n1")], [run(1, ("x9",), 8)])
    assert slots["n1"].free == 8


# --------------------------------------------------------------------------- the simulator


def test_the_simulator_and_the_daemon_requeue_the_same_jobs_to_complete_a_node(
        monkeypatch: object) -> None:
    """Two 8-GPU nodes; team a runs two 4-GPU jobs on each (job 3, on n2, not
    resumable). b's 8-GPU job (t=1200) needs a whole node. Before, the two youngest
    resumable jobs were requeued, 4 on n2 and 2 on n1: 4 + 4 free, and b's job still
    could not start. Now jobs 1 and 2, which empty n1, are requeued, the same in the
    simulator and in the daemon's plan_cycle on the same state, and b's job starts."""
    import pytest
    from test_sim_engine import cfg_with, job
    from test_sim_same_code import SETTINGS, observation

    from slurm_ml.daemon.plan import plan_cycle
    from slurm_ml.policy import fairshare
    from slurm_ml.sim.engine import Engine, simulate
    from slurm_ml.store.records import ReconcilerDecision

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    cfg = cfg_with([("big", "n[1-2]", "a100_80g", 8, "leaf1")], preempt_cap_fraction=1.0,
                   preempt_after_wait_s=300.0, preempt_min_gap=0.2)
    jobs = [job(i, "a", i, 4, 40_000, min_runtime_s=600, resumable=i != 3)
            for i in range(1, 5)]
    jobs.append(job(5, "b", 1200, 8, 3000, min_runtime_s=600))
    result = simulate(cfg, jobs, "budget", settings=SETTINGS)
    by_id = {j.job_id: j for j in result.jobs}
    assert result.preemptions == 2
    assert [by_id[i].requeues for i in range(1, 6)] == [1, 1, 0, 0, 0]
    assert by_id[5].start_s is not None and by_id[5].start_s < 3600

    from datetime import UTC, datetime
    seen: list[list[fairshare.Footprint]] = []
    real = fairshare.fair_share

    def recording(cfg: object, fps: object, now: int, *args: object, **kw: object) -> object:
        if isinstance(fps, fairshare.FootprintLedger):
            seen.append(list(fps))
        return real(cfg, fps, now, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(fairshare, "fair_share", recording)
    specs_by_id = {j.job_id: j for j in jobs}
    history: list[ReconcilerDecision] = []
    compared = 0
    for record in Engine(cfg, jobs, "budget", SETTINGS).cycles():
        decision = record.decision
        assert decision is not None
        plan = plan_cycle(cfg, observation(cfg, decision, seen[-1], specs_by_id, history))
        daemon = [(a.job_id, a.details["for_job"], a.details["nodes"]) for a in plan.actions
                  if a.kind == "requeue"]
        assert daemon == [(r.victim, r.for_job, r.details["nodes"]) for r in decision.requeues]
        compared += bool(daemon)
        for rq in decision.requeues:
            history.append(ReconcilerDecision(
                idempotency_key=f"rq{len(history)}", cycle=0, job_id=rq.victim, kind="requeue",
                reason=rq.reason, decided_at=datetime.fromtimestamp(decision.now, UTC),
                dry_run=False, details={"gpus": rq.gpus}))
        if record.t_s > 4 * 3600:
            break
    assert compared == 1  # one cycle requeued both, and the daemon agreed


# --------------------------------------------------------------------------- property


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeSpec], list[RunningJob], WaitingJob]:
    """Up to six nodes of 4 or 8 GPUs over two leaves, jobs packed onto them, one job
    waiting for 1 to 16 GPUs."""
    specs = [spec(f"n{i}", draw(st.sampled_from(["leaf1", "leaf2"])),
                  draw(st.sampled_from([4, 8])), draw(st.booleans()) or draw(st.booleans()))
             for i in range(draw(st.integers(1, 6)))]
    running: list[RunningJob] = []
    job_id = 1
    for s in specs:
        left = s.gpus
        while left and draw(st.booleans()):
            g = draw(st.integers(1, left))
            running.append(run(job_id, (s.name,), g, ran=draw(st.integers(2, 20)) * H,
                               requeue=draw(st.booleans()),
                               qos=draw(st.sampled_from([ALLOC_QOS, ALLOC_QOS, FREE_QOS]))))
            job_id += 1
            left -= g
    return specs, running, wait(draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16])))


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_every_requeue_lets_the_starved_job_start_and_none_happens_otherwise(
        scenario: tuple[list[NodeSpec], list[RunningJob], WaitingJob]) -> None:
    specs, running, job = scenario
    before = node_slots(specs, running)

    out = plan(specs, running, [job])

    victims = {r.victim for r in out}
    after = node_slots(specs, [r for r in running if r.job_id not in victims])
    if fits_now(job.gpus, job.gpu_types, before):
        assert out == []  # not starved
    elif out:  # the requeues make room for it, on the nodes they name
        assert fits_now(job.gpus, job.gpu_types, after)
        nodes = set(out[0].details["nodes"])  # type: ignore[arg-type]
        assert fits_now(job.gpus, job.gpu_types,
                        {n: s for n, s in after.items() if n in nodes})
        assert len({spec.leaf for spec in specs if spec.name in nodes}) == 1
    else:  # no requeue: no set of requeueable jobs would have made room
        movable = [r for r in running if r.requeue and r.qos == ALLOC_QOS]
        everything = node_slots(specs, [r for r in running if r not in movable])
        one_leaf = [{n: s for n, s in everything.items() if s.spec.leaf == leaf}
                    for leaf in ("leaf1", "leaf2")]
        single = job.gpus <= max(s.gpus for s in specs)
        if single:
            assert not fits_now(job.gpus, job.gpu_types, everything)
        else:
            assert not any(fits_now(job.gpus, job.gpu_types, room) for room in one_leaf)
