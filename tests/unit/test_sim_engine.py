"""The simulator's engine on tiny hand-made scenarios, with exact expected starts and ends."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, load_config
from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree, NodeClass
from slurm_ml.sim.engine import Engine, SimSettings, simulate
from slurm_ml.sim.result import SimResult
from slurm_ml.sim.workload import DEBUG, LARGE, SimJob

BASE = load_config(DEFAULT_CONFIG)

NodeSpec = tuple[str, str, str, int, str]  # class, nodes, GPU type, GPUs per node, leaf


def cfg_with(nodes: list[NodeSpec], teams: dict[str, float] | None = None,
             **contracts: Any) -> Config:
    """The example config with these node classes, one project per team (user u<team>)
    and contract knobs overridden."""
    classes = tuple(NodeClass(name, ns, gtype, gpn, leaf, (gtype,), 32, 256_000)
                    for name, ns, gtype, gpn, leaf in nodes)
    teams = teams or {"a": 1.0, "b": 1.0}
    budgets = BudgetTree("ml", (BudgetProgram("all", 1.0, tuple(
        BudgetProject(team, w, (f"u{team}",)) for team, w in teams.items())),))
    policy = dataclasses.replace(
        BASE.policy, contracts=dataclasses.replace(BASE.policy.contracts, **contracts))
    return dataclasses.replace(BASE, node_classes=classes, budgets=budgets, policy=policy)


def job(job_id: int, team: str, submit: float, gpus: int, duration: float,
        **more: Any) -> SimJob:
    return SimJob(job_id=job_id, team=team, user=f"u{team}", submit_s=submit, gpus=gpus,
                  duration_s=duration, **more)


def runs(result: SimResult) -> dict[int, tuple[float | None, float | None]]:
    return {j.job_id: (j.start_s, j.end_s) for j in result.jobs}


ONE_NODE = [("n", "n1", "a100_80g", 4, "leaf1")]
TWO_NODES = [("n", "n[1-2]", "a100_80g", 4, "leaf1")]


# --------------------------------------------------------------------------- ordering


def test_fifo_runs_jobs_in_submit_order_not_id_order() -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 100), job(3, "b", 1, 4, 50), job(2, "a", 2, 4, 10)]
    assert runs(simulate(cfg, jobs, "fifo")) == {1: (0, 100), 3: (100, 150), 2: (150, 160)}


def test_backfill_lets_a_short_job_jump_without_delaying_the_reserved_job() -> None:
    """j3 (a whole node) is blocked and reserves node n1 from t=100 (when j1 ends); the
    short j5 fits before that and jumps the queue; the long j4 would sit on the reserved
    node past t=100, so it waits; j3 starts exactly at its reservation."""
    cfg = cfg_with(TWO_NODES)
    jobs = [job(1, "a", 0, 2, 100),  # n1 (best fit among equals: the first)
            job(2, "b", 0, 4, 1000),  # n2
            job(3, "a", 10, 4, 50),  # blocked: reserves n1 at t=100
            job(4, "b", 20, 2, 500),  # fits n1 now but ends after 100: no
            job(5, "a", 30, 2, 60)]  # fits n1 and ends at 90 <= 100: backfilled
    assert runs(simulate(cfg, jobs, "fifo")) == {
        1: (0, 100), 2: (0, 1000), 3: (100, 150), 4: (150, 650), 5: (30, 90)}


def test_a_long_job_may_backfill_off_the_reserved_nodes() -> None:
    cfg = cfg_with([("n", "n[1-3]", "a100_80g", 4, "leaf1")])
    jobs = [job(1, "a", 0, 4, 100),  # n1
            job(2, "a", 0, 4, 100),  # n2
            job(3, "a", 0, 2, 1000),  # n3 (2 left)
            job(4, "b", 10, 8, 50),  # 2 whole nodes: reserves n1, n2 at t=100
            job(5, "b", 20, 2, 5000)]  # ends long after 100 but n3 is not reserved
    assert runs(simulate(cfg, jobs, "fifo")) == {
        1: (0, 100), 2: (0, 100), 3: (0, 1000), 4: (100, 150), 5: (20, 5020)}


def test_best_fit_keeps_whole_nodes_for_whole_node_jobs() -> None:
    cfg = cfg_with(TWO_NODES)
    jobs = [job(1, "a", 0, 3, 100),  # n1 (1 left)
            job(2, "a", 1, 1, 100),  # best fit: n1's last GPU, not n2
            job(3, "b", 2, 4, 100)]  # n2 is still whole
    assert runs(simulate(cfg, jobs, "fifo")) == {1: (0, 100), 2: (1, 101), 3: (2, 102)}


# --------------------------------------------------------------------------- placement


LEAVES = [("l1", "n[1-2]", "a100_80g", 4, "leaf1"), ("l2", "n[3-5]", "a100_80g", 4, "leaf2")]


def placed(cfg: Config, jobs: list[SimJob]) -> dict[int, tuple[str, ...]]:
    """Where each job runs after the first cycle (t=0)."""
    engine = Engine(cfg, jobs, "fifo")
    next(engine.cycles())
    st = engine.st
    return {t.spec.job_id: tuple(st.cluster.names[n] for n, _ in t.alloc)
            for t in st.tasks if t.alloc}


def test_a_gang_takes_whole_nodes_under_one_leaf() -> None:
    cfg = cfg_with(LEAVES)
    # n1 is partly used, so leaf1 has one whole node: the 2-node gang goes to leaf2
    got = placed(cfg, [job(1, "a", 0, 1, 100), job(2, "b", 0, 8, 100, kind=LARGE)])
    assert got == {1: ("n1",), 2: ("n3", "n4")}


def test_a_gang_picks_the_leaf_it_fills_best() -> None:
    cfg = cfg_with(LEAVES)
    got = placed(cfg, [job(1, "b", 0, 8, 100, kind=LARGE)])  # leaf1 (2 whole) over leaf2 (3)
    assert got == {1: ("n1", "n2")}


def test_a_gang_spreads_over_leaves_only_when_no_leaf_has_room() -> None:
    cfg = cfg_with(LEAVES)
    got = placed(cfg, [job(1, "a", 0, 4, 100), job(2, "a", 0, 4, 100),  # n1, n2: leaf1 is full
                       job(3, "b", 0, 12, 100, kind=LARGE)])
    assert got[3] == ("n3", "n4", "n5")  # one leaf still fits it
    got = placed(cfg, [job(1, "a", 0, 4, 100), job(2, "b", 0, 16, 100, kind=LARGE)])
    assert sorted(got[2]) == ["n2", "n3", "n4", "n5"]  # 4 nodes: leaf2's 3 + leaf1's 1


def test_a_gang_bigger_than_a_node_rounds_up_to_whole_nodes() -> None:
    cfg = cfg_with(LEAVES)
    engine = Engine(cfg, [job(1, "a", 0, 6, 100, kind=LARGE), job(2, "b", 0, 4, 100)], "fifo")
    record = next(engine.cycles())
    assert [n for n, _ in engine.st.by_id[1].alloc] == [0, 1]  # n1, n2: 8 GPUs held for 6
    assert record.sample.busy_gpus == {"a": 8, "b": 4}
    assert record.sample.free_gpus == 20 - 12


def test_typed_jobs_run_only_on_their_type() -> None:
    cfg = cfg_with([("big", "n1", "a100_80g", 4, "leaf1"), ("old", "v1", "v100", 4, "leaf2")])
    jobs = [job(1, "a", 0, 4, 100, gpu_type="v100"),
            job(2, "b", 1, 2, 50, gpu_type="v100"),  # the a100 node is free: it waits anyway
            job(3, "b", 2, 2, 50)]  # untyped: runs on the a100 node at once
    result = simulate(cfg, jobs, "fifo")
    assert runs(result) == {1: (0, 100), 2: (100, 150), 3: (2, 52)}


def test_a_job_that_can_never_fit_never_starts_and_blocks_nobody() -> None:
    cfg = cfg_with(ONE_NODE)
    result = simulate(cfg, [job(1, "a", 0, 8, 100), job(2, "b", 1, 4, 10)], "fifo")
    assert runs(result) == {1: (None, None), 2: (1, 11)}


# --------------------------------------------------------------------------- contracts


def contract_cfg(**more: Any) -> Config:
    return cfg_with(ONE_NODE, preempt_cap_fraction=1.0, preempt_after_wait_s=300.0,
                    preempt_min_gap=0.2, **more)


def contract_jobs(resumable: bool = True) -> list[SimJob]:
    """Team a fills the node with two long jobs; team b asks for half of it at t=100."""
    return [job(1, "a", 0, 2, 100_000, min_runtime_s=600, resumable=resumable),
            job(2, "a", 0, 2, 100_000, min_runtime_s=600, resumable=resumable),
            job(3, "b", 100, 2, 3000, min_runtime_s=600)]


def test_budget_requeues_an_over_served_job_losing_only_the_work_since_its_checkpoint() -> None:
    """Until t=2400 the last hour's demand fits the node, so a is owed all it ran (ratio
    1). At the 2700 s cycle the hour holds 4 x 2700 + 2 x 2600 GPU-s of demand for 4 x
    3600: a is owed 9200 GPU-s and ran 10800 (ratio 1.17), b ran nothing: a's youngest
    job (job 2, by id among equals) is requeued. It had run 2700 s, checkpointed at 1800 s:
    900 s x 2 GPUs are lost, and it resumes when b's job ends. (Window ratios only:
    ``reclaim_entitlement`` off; the next test has it on.)"""
    result = simulate(contract_cfg(reclaim_entitlement=False), contract_jobs(), "budget",
                      settings=SimSettings(checkpoint_s=1800))
    assert result.preemptions == 1
    by_id = {j.job_id: j for j in result.jobs}
    assert runs(result) == {1: (0, 100_000), 2: (0, 5700 + 100_000 - 1800), 3: (2700, 5700)}
    assert (by_id[2].requeues, by_id[2].lost_gpu_s) == (1, 900 * 2)
    assert by_id[2].run_s == 2700 + 100_000 - 1800
    assert (by_id[1].requeues, by_id[3].requeues) == (0, 0)


def test_budget_reclaims_entitlement_at_the_first_cycle_past_protection() -> None:
    """``reclaim_entitlement`` (the default): b runs nothing of its 2-GPU entitlement
    and a runs 4, above its 2, so at the first cycle where b's job has waited 300 s and
    a's jobs are past their 600 s contracts (t=600) a's job 2 is requeued, whatever the
    window ratios (a is owed all it ran until t=2400). It had run 600 s, nothing
    checkpointed: 600 s x 2 GPUs lost; it resumes when b's job ends."""
    cfg = contract_cfg()
    assert cfg.policy.contracts.reclaim_entitlement
    result = simulate(cfg, contract_jobs(), "budget", settings=SimSettings(checkpoint_s=1800))
    assert result.preemptions == 1
    by_id = {j.job_id: j for j in result.jobs}
    assert runs(result) == {1: (0, 100_000), 2: (0, 3600 + 100_000), 3: (600, 3600)}
    assert (by_id[2].requeues, by_id[2].lost_gpu_s) == (1, 600 * 2)
    # without the reclaim the same jobs wait for the window ratios (the test above)
    window = simulate(contract_cfg(reclaim_entitlement=False), contract_jobs(), "budget")
    assert runs(window)[3] == (2700, 5700)


def test_budget_nocontract_never_requeues() -> None:
    result = simulate(contract_cfg(), contract_jobs(), "budget-nocontract")
    assert result.preemptions == 0
    assert runs(result)[3] == (100_000, 103_000)


def test_non_resumable_jobs_are_never_requeued() -> None:
    result = simulate(contract_cfg(), contract_jobs(resumable=False), "budget")
    assert result.preemptions == 0
    assert all(j.requeues == 0 for j in result.jobs)


def test_the_minimum_runtime_protects_a_job() -> None:
    """The same scenario with a 2-hour contract: the requeue waits for it (7200 s)."""
    jobs = [dataclasses.replace(j, min_runtime_s=7200) if j.team == "a" else j
            for j in contract_jobs()]
    result = simulate(contract_cfg(), jobs, "budget", settings=SimSettings(checkpoint_s=1800))
    assert result.preemptions == 1
    assert runs(result)[3][0] == 7200
    by_id = {j.job_id: j for j in result.jobs}
    assert by_id[2].lost_gpu_s == 0.0  # 7200 s is a checkpoint


# --------------------------------------------------------------------------- policies


def test_budget_puts_the_under_served_team_first() -> None:
    """a has run for an hour; when the node frees, b's job goes first although a's
    waited longer (fifo starts a's)."""
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 3600), job(2, "a", 10, 4, 100), job(3, "b", 20, 4, 100)]
    assert runs(simulate(cfg, jobs, "fifo"))[2] == (3600, 3700)
    for policy in ("budget", "budget-nocontract", "slurm-fairshare"):
        got = runs(simulate(cfg, jobs, policy))
        assert (got[3], got[2]) == ((3600, 3700), (3700, 3800)), policy


def test_free_qos_work_runs_after_alloc_work_under_budget() -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 1000), job(2, "b", 10, 4, 100, min_runtime_s=0),
            job(3, "a", 20, 4, 100)]
    got = runs(simulate(cfg, jobs, "budget"))
    assert (got[3], got[2]) == ((1000, 1100), (1100, 1200))


def test_slurm_fairshare_usage_decays_with_the_half_life() -> None:
    """a used the node for an hour, then b for 20 minutes; both queue a job while b's
    runs. With Slurm's 7-day half-life a has used more, so b's job goes first although
    a's is older; with a 1-minute half-life a's hour is forgotten and a's goes first."""
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 3600), job(2, "b", 3600, 4, 1200),
            job(3, "a", 3900, 4, 100), job(4, "b", 4000, 4, 100)]
    week = runs(simulate(cfg, jobs, "slurm-fairshare"))
    assert (week[4], week[3]) == ((4800, 4900), (4900, 5000))
    minute = runs(simulate(cfg, jobs, "slurm-fairshare", settings=SimSettings(half_life_s=60)))
    assert (minute[3], minute[4]) == ((4800, 4900), (4900, 5000))


# --------------------------------------------------------------------------- the run


def test_samples_every_cycle_with_busy_pending_free_and_fragmented() -> None:
    cfg = cfg_with(TWO_NODES)
    jobs = [job(1, "a", 0, 3, 1000), job(2, "a", 0, 3, 1000), job(3, "b", 10, 4, 100)]
    result = simulate(cfg, jobs, "budget", settings=SimSettings(cycle_s=300, owed_every_s=300))
    first = next(s for s in result.samples if s.t_s == 300)
    assert first.busy_gpus == {"a": 6}
    assert first.pending_gpus == {"b": 4}
    assert (first.free_gpus, first.fragmented_gpus) == (2, 2)  # 1+1 free, b needs 4 on one
    assert set(first.owed_gpu_h) == {"a", "b"} and first.delivered_gpu_h["a"] == pytest.approx(
        6 * 300 / 3600)
    assert [s.t_s for s in result.samples] == [300.0 * k for k in range(len(result.samples))]
    assert result.team_weights == {"a": 0.5, "b": 0.5}
    assert result.cluster_gpus == 8 and result.end_s == 1100


@pytest.mark.parametrize("policy", ["fifo", "budget"])
def test_every_policy_samples_owed_every_few_cycles(policy: str) -> None:  # 1200 s: 4
    """The same cadence for every policy, so that their reports compare: ``budget``
    computes fair share every cycle it has work waiting, but samples it no more often;
    with nothing waiting it computes none, and the sample is taken for it."""
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 10_000), job(2, "b", 10, 4, 10)]  # 2 waits behind 1 a while
    result = simulate(cfg, jobs, policy, settings=SimSettings(cycle_s=300, owed_every_s=1200))
    measured = [i for i, s in enumerate(result.samples) if s.owed_gpu_h]
    assert measured == list(range(0, len(result.samples), 4))


def test_the_run_stops_at_end_s() -> None:
    cfg = cfg_with(ONE_NODE)
    result = simulate(cfg, [job(1, "a", 0, 4, 10_000), job(2, "b", 10, 4, 10)], "fifo",
                      settings=SimSettings(end_s=3000))
    assert result.end_s == 3000
    assert runs(result) == {1: (0, None), 2: (None, None)}
    assert result.jobs[0].run_s == 3000


def test_progress_is_reported_about_a_hundred_times() -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(i, "a", i * 100.0, 1, 50) for i in range(1, 2000)]
    calls: list[tuple[float, float]] = []
    simulate(cfg, jobs, "fifo", progress=lambda t, end: calls.append((t, end)))
    assert 50 <= len(calls) <= 102
    assert [t for t, _ in calls] == sorted(t for t, _ in calls)
    assert calls[-1][1] == 199_900


def test_the_clock_starts_by_the_first_job() -> None:
    """A trace whose times are not rebased (epoch seconds) does not simulate the years
    before its first job."""
    cfg = cfg_with(ONE_NODE)
    calls: list[float] = []
    result = simulate(cfg, [job(1, "a", 1_500_000_123, 4, 1000)], "budget",
                      progress=lambda t, end: calls.append(t))
    assert result.start_s == 1_500_000_000 - 1_500_000_000 % 300
    assert runs(result) == {1: (1_500_000_123, 1_500_001_123)}
    assert len(result.samples) == 4 and len(calls) <= 3


@pytest.mark.parametrize("policy", ["fifo", "slurm-fairshare", "budget", "budget-nocontract"])
def test_runs_are_deterministic(policy: str) -> None:
    cfg = cfg_with(LEAVES, {"a": 2.0, "b": 1.0, "c": 1.0}, preempt_cap_fraction=0.5,
                   preempt_after_wait_s=0.0)
    jobs = [job(i, "abc"[i % 3], (i * 37) % 900 + i * 20.0, [1, 2, 4, 8][i % 4],
                300 + (i * 91) % 4000, min_runtime_s=[600, 0, 900][i % 3],
                kind=DEBUG if i % 7 == 0 else LARGE if i % 4 == 3 else "small")
            for i in range(1, 120)]
    a = simulate(cfg, jobs, policy)
    b = simulate(cfg, jobs, policy)
    assert (a.jobs, a.samples, a.preemptions) == (b.jobs, b.samples, b.preemptions)
    assert all(j.end_s is not None for j in a.jobs)
    assert sum(j.run_s * j.gpus for j in a.jobs) >= sum(s.duration_s * s.gpus for s in jobs)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown policy 'lottery'"):
        simulate(cfg_with(ONE_NODE), [], "lottery")


# --------------------------------------------------------------------------- fast lane


def lane_cfg() -> Config:
    """ONE_NODE (4 GPUs) with a lane of 2 GPUs (half the cluster)."""
    cfg = cfg_with(ONE_NODE)
    return dataclasses.replace(cfg, policy=dataclasses.replace(
        cfg.policy, fast_lane=dataclasses.replace(cfg.policy.fast_lane, gpus_fraction=0.5)))


def test_a_burst_of_debug_jobs_between_cycles_gets_only_the_lanes_room() -> None:
    """b fills the node until t=450; a queues a 2-GPU job at t=10 and is the under-served
    team at the t=300 cycle. At t=400 b submits three debug jobs; admission has room for
    two in the lane (as submitd counts its own lane admissions until the next cycle), so
    when the node frees at t=450 two debug jobs start, then a's job (a's band is above
    b's), and the third debug job waits in b's band."""
    debug = {"min_runtime_s": 600, "kind": DEBUG}
    jobs = [job(1, "b", 0, 4, 450, min_runtime_s=3600),
            job(2, "a", 10, 2, 5000, min_runtime_s=3600),
            *(job(10 + k, "b", 400, 1, 600, **debug) for k in range(3))]
    got = runs(simulate(lane_cfg(), jobs, "budget"))
    assert got[10] == (450, 1050) and got[11] == (450, 1050)
    assert got[2] == (450, 5450)
    assert got[12] == (1050, 1650)


def test_a_job_stopped_for_its_requeue_is_not_keyed_before_it_is_queued_again() -> None:
    """Slurm holds a free job it has just stopped until its next pass is over: the job is
    PENDING but not queued. A cycle then must leave it alone (its key comes when it is
    queued again); reading its class's value raised KeyError when its class had no other
    queued job."""
    from slurm_ml.sim.state import PENDING

    cfg = cfg_with(TWO_NODES)
    engine = Engine(cfg, [job(1, "a", 0, 4, 5000), job(2, "b", 0, 4, 5000),
                          job(3, "a", 0, 2, 5000, min_runtime_s=0)], "budget")
    next(engine.cycles())
    st = engine.st
    stopped = st.by_id[3]
    assert stopped.state == PENDING and stopped in st.pending  # the nodes are full
    st.left_pending(stopped)  # as if it had started and Slurm had just stopped it
    st.pending.remove(stopped)
    st.fresh.append(stopped)
    engine.policy.cycle(st)  # the KeyError came from here
    assert stopped not in st.pending
