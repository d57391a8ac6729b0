"""The simulator runs the production policy code, not a copy of it.

(a) Swapping a function in ``slurm_ml/policy/`` changes what the simulator does, and
    both drivers call the one reconcile cycle (``policy.reconcile.reconcile``).
(b) Stepped cycle by cycle, the order and requeues the simulator uses are what the
    daemon's own ``plan_cycle`` decides on the same inputs (an Observation built from the
    simulated cluster: jobs, accounting rows, nodes, the requeue history).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import Any

import pytest
from builders import running_job, waiting_job
from daemon_helpers import nodes as config_nodes
from test_sim_engine import ONE_NODE, cfg_with, contract_cfg, contract_jobs, job, runs

from slurm_ml.config import Config
from slurm_ml.daemon.observe import Observation
from slurm_ml.daemon.plan import plan_cycle
from slurm_ml.model import ALLOC_QOS, GpuRequest, Job, JobState, JobUsage
from slurm_ml.policy import contracts, fairshare, reconcile
from slurm_ml.policy.contracts import AllocationPosition, PreemptionLedger
from slurm_ml.policy.fairshare import FairShare, Footprint, FootprintLedger
from slurm_ml.policy.placement import NodeSpec, node_slots
from slurm_ml.policy.reconcile import cycle as reconcile_cycle
from slurm_ml.sim.engine import Engine, SimSettings, simulate
from slurm_ml.sim.policies import BudgetCycleDecision
from slurm_ml.sim.workload import DEBUG, SimJob
from slurm_ml.store.records import ReconcilerDecision

# --------------------------------------------------------------------------- (a)


def test_a_different_site_factor_policy_changes_the_simulation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = cfg_with(ONE_NODE)
    jobs = [job(1, "a", 0, 4, 3600), job(2, "a", 10, 4, 100), job(3, "b", 20, 4, 100)]
    before = runs(simulate(cfg, jobs, "budget"))
    assert before[3] == (3600, 3700)  # b, under-served, first

    real = fairshare.site_factors

    def upside_down(fs: FairShare, pending: Iterable[fairshare.PendingJob],
                    cfg: Any) -> dict[int, int]:
        return {job_id: -v for job_id, v in real(fs, pending, cfg).items()}

    monkeypatch.setattr(fairshare, "site_factors", upside_down)
    after = runs(simulate(cfg, jobs, "budget"))
    assert after[2] == (3600, 3700)  # now the over-served a goes first


def test_the_daemon_and_the_simulator_call_the_one_reconcile_cycle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither driver orders the cycle's steps itself: each builds a ``CycleInput`` and
    calls ``reconcile``, and what it acts on is what that call returned."""
    calls: list[tuple[str, reconcile.CycleDecision]] = []
    real = reconcile.reconcile

    def spy(cfg: Config, inp: reconcile.CycleInput, **kw: Any) -> reconcile.CycleDecision:
        got = real(cfg, inp, **kw)
        calls.append((type(inp.queue).__name__, got))
        return got

    monkeypatch.setattr(reconcile, "reconcile", spy)
    result = simulate(contract_cfg(), contract_jobs(), "budget")
    sim_calls = [d for who, d in calls if who == "SimQueue"]
    assert sim_calls and len(sim_calls) == len(calls)
    assert result.preemptions == sum(len(d.all_requeues) for d in sim_calls) == 1

    cfg, jobs = mixed_scenario()
    engine = Engine(cfg, jobs, "budget", SETTINGS, decisions=True)
    record = next(r for r in engine.cycles() if r.decision and r.decision.requeues)
    assert record.decision is not None
    obs = observation(cfg, record.decision, [], {j.job_id: j for j in jobs}, [])
    calls.clear()
    plan = plan_cycle(cfg, obs)
    assert [who for who, _ in calls] == ["ObservedQueue"]
    decided = calls[0][1]
    assert plan.fair is decided.fair
    assert plan.site_factors == {**decided.site_factors, **decided.lane_factors}
    assert [a.job_id for a in plan.actions if a.kind == "requeue"] == [
        r.victim for r in decided.all_requeues]


def test_a_different_contract_policy_changes_the_simulation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert simulate(contract_cfg(), contract_jobs(), "budget").preemptions == 1
    monkeypatch.setattr(contracts, "plan_requeues", lambda *args, **kwargs: [])
    assert simulate(contract_cfg(), contract_jobs(), "budget").preemptions == 0


def test_a_different_fair_share_changes_the_simulation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = fairshare.fair_share

    def nobody_owed(cfg: Config, fps: Any, now: int, pending: Collection[tuple[str, str]] = (),
                    **kw: Any) -> FairShare:
        fs = real(cfg, fps, now, pending, **kw)
        return dataclasses.replace(fs, standings=tuple(
            dataclasses.replace(s, owed=0.0, entitled_gpus=0.0) for s in fs.standings))

    monkeypatch.setattr(fairshare, "fair_share", nobody_owed)
    result = simulate(contract_cfg(), contract_jobs(), "budget")
    # no ratio: nobody is over-served; no entitlement: nobody is below it
    assert result.preemptions == 0
    assert all(not s.owed_gpu_h or set(s.owed_gpu_h.values()) == {0.0} for s in result.samples)


def test_narrowing_the_contract_inputs_changes_no_decision(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle hands plan_requeues only possible victims and starved jobs, found from
    the accounts that can starve at all (for speed); with every alloc job waiting and
    every running job handed over, the run is the same."""
    cfg, jobs = mixed_scenario()
    narrowed = simulate(cfg, jobs, "budget", settings=SETTINGS)
    monkeypatch.setattr(reconcile_cycle, "starving_accounts",
                        lambda now, accounts, *rest: list(accounts))
    monkeypatch.setattr(reconcile_cycle, "starved_of", lambda now, waiting, *rest: list(waiting))
    monkeypatch.setattr(reconcile_cycle, "narrow_victims", lambda now, running, *rest: running)
    whole = simulate(cfg, jobs, "budget", settings=SETTINGS)
    assert narrowed.preemptions > 0
    assert (narrowed.jobs, narrowed.samples) == (whole.jobs, whole.samples)


def test_a_run_that_records_its_decisions_decides_the_same() -> None:
    """``simulate`` skips building the whole queue's values each cycle; a run that builds
    them (``Engine(decisions=True)``) gives every job the same outcome."""
    cfg, jobs = mixed_scenario()
    fast = simulate(cfg, jobs, "budget", settings=SETTINGS)
    engine = Engine(cfg, jobs, "budget", SETTINGS, decisions=True)
    records = list(engine.cycles())
    assert all(r.decision is not None for r in records)
    full = engine.result()
    assert fast.preemptions > 0
    assert (fast.jobs, fast.samples) == (full.jobs, full.samples)


def test_narrowing_keeps_a_job_that_starves_only_once_the_free_gpus_are_promised() -> None:
    """y's 4-GPU job takes the 2 free GPUs and one requeue; then y's 1-GPU job, which had
    free GPUs when the plan began, is starved too and gets a requeue of its own."""
    now = 1_700_000_000
    cfg = dataclasses.replace(contract_cfg().policy.contracts, preempt_cap_fraction=1.0,
                              preempt_after_wait_s=0.0)
    # 8-GPU nodes: m1 holds jobs 1-3 and has 2 GPUs free, m2 jobs 4-7; m3 (2 GPUs) job 8
    home = {i: "m1" if i <= 3 else "m2" if i <= 7 else "m3" for i in range(1, 9)}
    running = [running_job(i, start=now - 7200 - i, name=f"r{i}", account="x", user="ux",
                           gpus=2, gpu_type="t", time_min_s=600, nodes=(home[i],))
               for i in range(1, 9)]
    waiting = [waiting_job(100 + n, submit=now - 3600, account="y", user="uy", gpus=gpus, order=n)
               for n, gpus in enumerate((4, 1))]
    positions = {"x": AllocationPosition("x", 0.5, 2.0, 16.0),
                 "y": AllocationPosition("y", 0.5, 0.0, 0.0)}
    ledger = PreemptionLedger(last_requeue={}, recent=[])
    free = node_slots([NodeSpec("m1", "t", "l1", 8), NodeSpec("m2", "t", "l1", 8),
                       NodeSpec("m3", "t", "l1", 2)], running)
    whole = contracts.plan_requeues(now, running, waiting, positions, ledger, free, 18, cfg)
    assert [(r.victim, r.for_job) for r in whole] == [(1, 100), (2, 101)]
    victims = reconcile_cycle.narrow_victims(now, running, positions, ledger, cfg)
    starved = reconcile_cycle.starved_of(now, waiting, positions, cfg)
    assert contracts.plan_requeues(now, victims, starved, positions, ledger, free, 18,
                                   cfg, in_order=True, pool_given=True) == whole


# --------------------------------------------------------------------------- (b)

SETTINGS = SimSettings(cycle_s=300, checkpoint_s=900, end_s=8 * 3600)
WEIGHTS = {"a100_80g": 1.0, "a100_40g": 0.8}


def mixed_scenario(lane: bool = False) -> tuple[Config, list[SimJob]]:
    """Two GPU types and three teams: a floods the cluster first, b and c come later;
    free-QOS, non-resumable and typed jobs among them. ``lane``: with debug jobs of b
    and c, a fast lane of 4 GPUs and its own requeues (4 GPUs per window)."""
    cfg = cfg_with([("big", "n[1-2]", "a100_80g", 4, "leaf1"),
                    ("mid", "m[1-2]", "a100_40g", 4, "leaf2")],
                   {"a": 2.0, "b": 1.0, "c": 1.0},
                   preempt_cap_fraction=0.5, preempt_after_wait_s=300.0, preempt_min_gap=0.2,
                   requeue_cooldown_s=3600.0)
    if lane:
        cfg = dataclasses.replace(cfg, policy=dataclasses.replace(
            cfg.policy, fast_lane=dataclasses.replace(
                cfg.policy.fast_lane, gpus_fraction=0.25, preempt_cap_fraction=0.25,
                wake_min_gap_s=0)))  # every cycle a regular one, compared (test_sim_wakes)
    jobs = [job(i, "a", 10.0 * i, 2, 20_000, min_runtime_s=[600, 1800, 600][i % 3],
                resumable=i % 4 != 0) for i in range(1, 9)]
    jobs += [job(20 + i, "b", 1200 + 60 * i, 2, 3000, min_runtime_s=600) for i in range(3)]
    jobs += [job(30 + i, "c", 2000 + 60 * i, 4, 2000, min_runtime_s=900, gpu_type="a100_80g")
             for i in range(2)]
    jobs += [job(40, "b", 1500, 1, 5000, min_runtime_s=0),  # QOS free
             job(41, "c", 9000, 2, 1000, min_runtime_s=600, gpu_type="a100_40g")]
    if lane:
        jobs += [job(50 + i, team, at, gpus, 600, min_runtime_s=600, kind=DEBUG)
                 for i, (team, at, gpus) in enumerate((
                     ("b", 2500, 1), ("c", 2550, 2), ("b", 6100, 2), ("c", 12_000, 1),
                     ("b", 12_050, 2), ("c", 20_100, 2)))]
    return cfg, jobs


def observation(cfg: Config, decision: BudgetCycleDecision, footprints: list[Footprint],
                specs: dict[int, SimJob], history: list[ReconcilerDecision]) -> Observation:
    """What the daemon would observe of the simulated cluster at this cycle."""
    jobs: list[Job] = []
    count = len(decision.waiting)
    for w in decision.waiting:
        typed = next(iter(w.gpu_types)) if w.gpu_types else None
        jobs.append(Job(
            job_id=w.job_id, name=f"job{w.job_id}", user=w.user, account=w.account,
            partition="gpu", qos=w.qos, state=JobState.PENDING, reason=w.reason, nodes="",
            num_nodes=1, gpus=(GpuRequest(w.gpus, "node", typed),),
            # the trace's duration is the job's --time; its contract, the TimeMin fallback
            time_limit_min=math.ceil(specs[w.job_id].duration_s / 60),
            time_min_min=int(specs[w.job_id].min_runtime_s // 60), requeue=True,
            site_factor=decision.site_factors[w.job_id],
            priority=count - w.order, submit_time=w.submit, start_time=None))
    for r in decision.running:
        jobs.append(Job(
            job_id=r.job_id, name=r.name, user=r.user, account=r.account, partition="gpu",
            qos=r.qos, state=JobState.RUNNING, reason="None", nodes=",".join(r.nodes),
            num_nodes=len(r.nodes), gpus=(GpuRequest(r.gpus, "node", r.gpu_type),),
            time_limit_min=math.ceil(specs[r.job_id].duration_s / 60),
            time_min_min=(r.time_min_s or 0) // 60, requeue=r.requeue,
            site_factor=0, priority=0, submit_time=r.start, start_time=r.start))
    usage = []
    for fp in footprints:
        if fp.run_from is None:
            continue  # pending: slurmctld's job, above
        gpus = specs[fp.job_id].gpus
        gtype = next(t for t, w in WEIGHTS.items() if abs(w * gpus - fp.billing_gpus) < 1e-9)
        usage.append(JobUsage(
            job_id=fp.job_id, user=fp.user, account=fp.account,
            qos=ALLOC_QOS if fp.allocated else "free",
            state=JobState.RUNNING if fp.until is None else JobState.COMPLETED, elapsed_s=0,
            alloc_tres={"gres/gpu": gpus, f"gres/gpu:{gtype}": gpus}, start=fp.run_from,
            end=fp.until, submit=fp.pending_from))
    return Observation(now=decision.now, jobs=tuple(jobs), nodes=tuple(config_nodes(cfg)),
                       usage=tuple(usage), runaway=frozenset(), samples={},
                       history=tuple(history), orphans=())


@pytest.mark.parametrize("lane", [False, True], ids=["contracts", "with-lane-requeues"])
def test_each_cycle_decides_what_the_daemon_decides(monkeypatch: pytest.MonkeyPatch,
                                                     lane: bool) -> None:
    cfg, jobs = mixed_scenario(lane)
    specs = {j.job_id: j for j in jobs}
    seen: list[list[Footprint]] = []
    real = fairshare.fair_share

    def recording(cfg: Config, fps: Any, now: int, *args: Any, **kw: Any) -> FairShare:
        if isinstance(fps, FootprintLedger):
            seen.append(list(fps))
        return real(cfg, fps, now, *args, **kw)

    monkeypatch.setattr(fairshare, "fair_share", recording)
    history: list[ReconcilerDecision] = []
    cycles = requeued = ties = compared = lane_requeued = 0
    for record in Engine(cfg, jobs, "budget", SETTINGS).cycles():
        decision = record.decision
        assert decision is not None
        obs = observation(cfg, decision, seen[-1], specs, history)
        plan = plan_cycle(cfg, obs)
        # the same fair share (the ledger's sums and the daemon's walk agree)
        assert plan.fair.fair_tree_order == decision.fair.fair_tree_order
        for mine, theirs in zip(decision.fair.standings, plan.fair.standings, strict=True):
            assert (mine.path, mine.rank, mine.site_factor) == (
                theirs.path, theirs.rank, theirs.site_factor)
            assert mine.delivered == pytest.approx(theirs.delivered, abs=1e-9)
            assert mine.owed == pytest.approx(theirs.owed, abs=1e-9)
        # the same order and the same requeues
        assert plan.site_factors == decision.site_factors
        daemon_requeues = [(a.job_id, a.details["for_job"], a.decision) for a in plan.actions
                           if a.kind == "requeue"]
        assert not [a for a in plan.actions if a.kind != "requeue"]
        if knife_edge(decision.fair, plan.fair):
            ties += 1  # delivered/owed = 1 up to rounding: the two sums may fall either side
        else:
            assert daemon_requeues == [(r.victim, r.for_job, _kind(r))
                                       for r in decision.requeues]
            compared += bool(decision.requeues)
        for rq in decision.requeues:
            history.append(ReconcilerDecision(
                idempotency_key=f"rq{len(history)}", cycle=0, job_id=rq.victim, kind=_kind(rq),
                reason=rq.reason, decided_at=datetime.fromtimestamp(decision.now, UTC),
                dry_run=False, details={"gpus": rq.gpus}))
        cycles += 1
        requeued += len(decision.requeues)
        lane_requeued += sum(_kind(r) == "lane_requeue" for r in decision.requeues)
    assert cycles == 8 * 12 + 1
    assert compared >= 2 and requeued >= 2  # the scenario does exercise the contracts
    assert ties <= cycles // 4
    assert (lane_requeued >= 1) is lane  # and, with the lane, the lane's own requeues


def _kind(rq: contracts.Requeue) -> str:
    return "lane_requeue" if rq.details.get("lane") is True else "requeue"


def knife_edge(mine: FairShare, theirs: FairShare) -> bool:
    """Whether a project's delivered/owed is 1 in one computation and not bit-for-bit
    the same in the other: the contracts compare it with 1 exactly ("over-served" is
    > 1), so float rounding alone can decide a requeue there."""
    for a, b in zip(mine.standings, theirs.standings, strict=True):
        if a.kind != "project" or a.ratio is None or b.ratio is None or a.ratio == b.ratio:
            continue
        if abs(a.ratio - 1.0) < 1e-9 or abs(b.ratio - 1.0) < 1e-9:
            return True
    return False
