"""Fault refunds: a run that a slurm-ml drain ended is not charged to its team's window.

The pure rule (each route, the slack, what is never refunded), the sacct NodeList it needs,
the fair share it changes, and the daemon recording each refund once in the audit log."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from daemon_helpers import CFG, HOUR, NOW, world

from slurm_ml.daemon import views
from slurm_ml.daemon.apply import Applier
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import current_fair_share, plan_cycle
from slurm_ml.model import JobState, JobUsage
from slurm_ml.ops import report
from slurm_ml.policy.refunds import FaultDrain, refunds
from slurm_ml.slurm import parse
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store.fake import FakeStore
from slurm_ml.store.records import AuditEntry, ReconcilerDecision, derive_key

START, END = NOW - 3 * HOUR, NOW - HOUR
SLACK = 300


def run(job_id: int = 7, *, state: JobState = JobState.FAILED, nodes: str = "gpu05",
        start: int = START, end: int | None = END, gpus: int = 4) -> JobUsage:
    hi = NOW if end is None else end
    return JobUsage(job_id=job_id, user="alice", account="llm-pretrain", qos="alloc",
                    state=state, elapsed_s=hi - start,
                    alloc_tres={"gres/gpu": gpus, "gres/gpu:v100": gpus}, start=start,
                    end=end, submit=start - 600, nodes=nodes)


def drain(node: str = "gpu05", at: int = END, hook: str = "periodic",
          job_id: int | None = None) -> FaultDrain:
    return FaultDrain(key=derive_key("audit.drain", node, hook, at), node=node, at=at,
                      hook=hook, job_id=job_id, checks=("xid",), reason="slurm-ml: xid 79")


def decide(usage: list[JobUsage], drains: list[FaultDrain], slack: float = SLACK) -> list[Any]:
    return refunds(usage, drains, lambda u: views.expand(u.nodes), lambda u: u.gpus * 2.0,
                   slack)


# ------------------------------------------------------------------ the rule


def test_an_epilog_drain_naming_the_job_refunds_its_run() -> None:
    (r,) = decide([run()], [drain(hook="epilog", at=END + 20, job_id=7, node="gpu09")])
    assert (r.job_id, r.route, r.start, r.end) == (7, "job", START, END)
    assert r.gpu_hours == pytest.approx(4 * 2.0)
    assert r.billing_gpu_hours == pytest.approx(8 * 2.0)
    assert r.drain.hook == "epilog" and "names the job" in r.why


def test_a_prolog_drain_of_the_job_refunds_the_run_it_cut_short() -> None:
    short = run(state=JobState.REQUEUED, start=END - 5, end=END)
    (r,) = decide([short], [drain(hook="prolog", at=END - 4, job_id=7)])
    assert r.route == "job" and r.gpu_hours == pytest.approx(4 * 5 / 3600)


def test_a_periodic_drain_of_a_node_the_run_used_refunds_it() -> None:
    (r,) = decide([run(state=JobState.NODE_FAIL, nodes="gpu[05-06]")],
                  [drain(node="gpu06", at=END - 120)])
    assert r.route == "node" and r.drain.node == "gpu06"
    assert "120 s before it ended" in r.why


@pytest.mark.parametrize(("offset", "refunded"), [
    (SLACK, True), (-SLACK, True), (SLACK + 1, False), (-SLACK - 1, False)])
def test_a_node_drain_explains_the_end_only_within_the_slack(offset: int,
                                                              refunded: bool) -> None:
    got = decide([run()], [drain(at=END + offset)])
    assert bool(got) is refunded


def test_the_slack_is_the_knob() -> None:
    assert decide([run()], [drain(at=END + 900)], slack=1000)
    assert not decide([run()], [drain(at=END + 900)], slack=0)
    assert CFG.policy.fairshare.refund_slack_s == 300


@pytest.mark.parametrize("state", [JobState.COMPLETED, JobState.TIMEOUT,
                                   JobState.OUT_OF_MEMORY, JobState.DEADLINE])
def test_a_run_that_ended_of_itself_is_charged(state: JobState) -> None:
    assert not decide([run(state=state)], [drain(at=END), drain(hook="epilog", job_id=7)])


def test_a_running_job_is_not_refunded_yet() -> None:
    assert not decide([run(state=JobState.RUNNING, end=None)], [drain(at=NOW - 10)])


def test_a_drain_of_another_node_does_not_match() -> None:
    assert not decide([run(nodes="gpu05")], [drain(node="gpu06", at=END)])


def test_a_drain_naming_another_job_on_another_node_does_not_match() -> None:
    assert not decide([run()], [drain(node="gpu06", hook="epilog", job_id=8)])


def test_only_the_run_of_a_requeued_job_that_the_drain_ended_is_refunded() -> None:
    first = run(state=JobState.REQUEUED, start=START, end=START + HOUR)
    second = run(state=JobState.FAILED, start=START + HOUR + 120, end=END)
    (r,) = decide([first, second], [drain(hook="epilog", job_id=7, at=START + HOUR + 10)])
    assert r.start == START


def test_each_run_is_refunded_once_for_the_nearest_drain() -> None:
    near, far = drain(at=END + 10), drain(node="gpu06", at=END - 200)
    (r,) = decide([run(nodes="gpu[05-06]")], [far, near])
    assert r.drain == near
    # a drain naming the job wins over a nearer node drain
    named = drain(hook="epilog", job_id=7, at=END + 250, node="gpu05")
    (r,) = decide([run(nodes="gpu[05-06]")], [near, named])
    assert r.drain == named


# ------------------------------------------------------------------ sacct NodeList


def test_sacct_reads_the_node_list_and_still_reads_lines_without_it() -> None:
    assert parse.SACCT_FIELDS[-1] == "NodeList"
    new = f"7|alice|llm-pretrain|alloc|FAILED|60|gres/gpu=4|{START}|{END}|a|b|{START}|gpu[05-06]"
    old = f"8|alice|llm-pretrain|alloc|NODE_FAIL|60|gres/gpu=4|{START}|{END}|a|b|{START - 9}"
    plain = f"9|alice|llm-pretrain|alloc|FAILED|60|gres/gpu=4|{START}|{END}|train|{START - 5}"
    got = {u.job_id: u for u in parse.parse_sacct_usage("\n".join([new, old, plain]), 0, NOW)}
    assert (got[7].nodes, got[7].submit) == ("gpu[05-06]", START)
    assert views.expand(got[7].nodes) == ("gpu05", "gpu06")
    assert (got[8].nodes, got[8].submit) == ("", START - 9)
    assert (got[9].nodes, got[9].submit) == ("", START - 5)


def test_the_client_asks_sacct_for_the_node_list() -> None:
    assert "NodeList" in parse.SACCT_FIELDS
    assert JobUsage(1, "u", "a", "alloc", JobState.FAILED, 0).nodes == ""


# ------------------------------------------------------------------ audit entries


def _audit(node: str, at: int, *, hook: str | None = "periodic", job_id: int | None = None,
           applied: bool = True, action: str = "drain") -> AuditEntry:
    details: dict[str, Any] = {"reason": "slurm-ml: xid 79 on gpu 3", "applied": applied,
                               "checks": ["xid"], "job_id": job_id,
                               "findings": [{"check_id": "xid", "severity": "drain"}]}
    if hook is not None:
        details["hook"] = hook
    return AuditEntry(idempotency_key=derive_key("audit.drain", node, hook, at),
                      actor=f"slurm-ml/{hook or 'admin'}", action=action, target=node,
                      at=datetime.fromtimestamp(at, UTC), details=details)


def test_only_applied_hook_drains_are_fault_drains() -> None:
    got = views.fault_drains([
        _audit("gpu05", END, job_id=7, hook="epilog"),
        _audit("gpu06", END, applied=False),  # Slurm refused it: the node ran on
        _audit("gpu06", END, hook=None),  # no hook: an operator's or the daemon's drain
        _audit("gpu06", END, action="resume"),
    ])
    assert [(d.node, d.hook, d.job_id, d.checks, d.at) for d in got] == [
        ("gpu05", "epilog", 7, ("xid",), END)]


# ------------------------------------------------------------------ fair share and budget


def _faulted_world() -> tuple[FakeSlurm, FakeStore, JobUsage]:
    slurm = world()
    failed = run(job_id=30, nodes="gpu05")
    slurm.usage.append(failed)
    store = FakeStore()
    return slurm, store, failed


def _project(fair: Any, account: str) -> Any:
    return next(s for s in fair.standings if s.kind == "project" and s.account == account)


def test_the_teams_delivered_drops_by_the_refunded_hours() -> None:
    slurm, store, failed = _faulted_world()
    before = _project(current_fair_share(CFG, observe(CFG, slurm, store, NOW)), "llm-pretrain")
    store.audit(_audit("gpu05", END + 60))
    obs = observe(CFG, slurm, store, NOW)
    (r,) = views.run_refunds(CFG, obs.usage, obs.drains)
    after = _project(current_fair_share(CFG, obs), "llm-pretrain")
    charged = views.usage_billing_gpus(CFG, failed) * 2.0
    assert r.billing_gpu_hours == pytest.approx(charged) and charged > 0
    assert before.delivered - after.delivered == pytest.approx(charged)
    # the team still asked for those GPUs: its demand stays
    assert after.demand == pytest.approx(before.demand)


def test_budget_status_shows_the_refunded_hours_apart() -> None:
    slurm, store, _failed = _faulted_world()
    store.audit(_audit("gpu05", END + 60))
    obs = observe(CFG, slurm, store, NOW)
    refunded = views.run_refunds(CFG, obs.usage, obs.drains)
    data = report.budget_json(current_fair_share(CFG, obs, refunded), {}, (), refunded)
    row = next(r for r in data["nodes"] if r["kind"] == "project"
               and r["account"] == "llm-pretrain")
    assert row["refunded_gpu_hours"] == pytest.approx(8.0)
    other = next(r for r in data["nodes"] if r["kind"] == "project"
                 and r["account"] == "detection")
    assert not other["refunded_gpu_hours"]
    assert data["refunds"][0]["drain"]["node"] == "gpu05"
    text = report.budget_text(data)
    assert "refunded" in text and "job 30 ended FAILED" in text


# ------------------------------------------------------------------ the daemon's record


def _refund_rows(store: FakeStore) -> list[AuditEntry]:
    return [e for e in store.audit_entries() if e.action == "refund"]


def test_the_daemon_records_each_refund_once_with_its_drain() -> None:
    slurm, store, _failed = _faulted_world()
    entry = _audit("gpu05", END + 60)
    store.audit(entry)
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    (a,) = [x for x in plan.actions if x.kind == "refund"]
    assert a.job_id == 30 and a.details["drain"]["node"] == "gpu05"
    Applier(slurm, store).apply(plan)
    rows = _refund_rows(store)
    assert [r.target for r in rows] == ["job 30", "job 30"]  # intent and done
    done = next(r for r in rows if r.details.get("phase") == "done")
    assert done.details["drain"]["key"] == entry.idempotency_key
    assert done.details["drain"]["node"] == "gpu05"
    assert done.details["drain"]["hook"] == "periodic"
    assert done.details["drain"]["findings"] == ["xid"]
    assert done.details["gpu_hours"] == pytest.approx(8.0)
    # later cycles (and a restart) neither plan nor record it again, and still refund it
    for later in (NOW + 60, NOW + 120):
        obs = observe(CFG, slurm, store, later)
        again = plan_cycle(CFG, obs)
        assert not [x for x in again.actions if x.kind == "refund"]
        Applier(slurm, store).apply(again)
        assert views.run_refunds(CFG, obs.usage, obs.drains)
    assert len(_refund_rows(store)) == 2
    assert not [c for c in slurm.calls if "30" in c]  # nothing done to Slurm for it


def test_a_refund_planned_twice_is_applied_once() -> None:
    slurm, store, _failed = _faulted_world()
    store.audit(_audit("gpu05", END + 60))
    obs = observe(CFG, slurm, store, NOW)
    plan = plan_cycle(CFG, obs)
    Applier(slurm, store).apply(plan)
    # the same plan again, as after a crash before the decision was read back
    report_ = Applier(slurm, store).apply(replace(plan, changed={}))
    assert [a.kind for a in report_.already if a.kind == "refund"] == ["refund"]
    assert len(_refund_rows(store)) == 2


@pytest.mark.parametrize(("cause", "refunded"), [("finding", True), ("maintenance", False)])
def test_a_requeue_for_a_repair_of_a_faulty_node_is_refunded(cause: str,
                                                             refunded: bool) -> None:
    slurm, store, _failed = _faulted_world()
    slurm.usage.append(run(job_id=31, state=JobState.REQUEUED, nodes="gpu06"))
    store.record_decision(ReconcilerDecision(
        idempotency_key=derive_key("daemon.repair_requeue", 31, START), cycle=1, job_id=31,
        kind="repair_requeue", reason="repair at the contract", dry_run=False,
        decided_at=datetime.fromtimestamp(END, UTC),
        details={"node": "gpu06", "cause": cause, "checks": ["ecc.remap_pending"],
                 "drain_reason": "slurm-ml: remap pending"}))
    obs = observe(CFG, slurm, store, NOW)
    got = {r.job_id: r for r in views.run_refunds(CFG, obs.usage, obs.drains)}
    assert (31 in got) is refunded
    if refunded:
        assert (got[31].route, got[31].drain.hook, got[31].drain.checks) == (
            "job", "repair", ("ecc.remap_pending",))
        assert "requeued it to repair gpu06" in got[31].why


def test_a_drain_that_explains_a_refunded_run_better_records_no_second_refund() -> None:
    slurm, store, _failed = _faulted_world()
    store.audit(_audit("gpu05", END + 200))
    Applier(slurm, store).apply(plan_cycle(CFG, observe(CFG, slurm, store, NOW)))
    store.audit(_audit("gpu05", END + 20, hook="epilog", job_id=30))  # read a cycle later
    obs = observe(CFG, slurm, store, NOW + 60)
    (r,) = views.run_refunds(CFG, obs.usage, obs.drains)
    assert r.drain.hook == "epilog"  # the better drain explains it now
    again = plan_cycle(CFG, obs)
    assert not [a for a in again.actions if a.kind == "refund"]
    Applier(slurm, store).apply(again)
    assert len(_refund_rows(store)) == 2
