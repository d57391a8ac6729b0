"""Repairs at the contract: a node with a drain-after-job finding (or an admin's
maintenance drain) has each resumable job requeued once its protected runtime ends."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from daemon_helpers import HOUR, NOW, config, daemon, job, nodes

from slurm_ml.config import ConfigError
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import plan_cycle
from slurm_ml.model import JobState, Node
from slurm_ml.policy.repairs import (
    HOOK_DRAIN_GRACE_S,
    NodeEvent,
    NodeFinding,
    RepairPlan,
    current_findings,
    maintenance_match,
    plan_repairs,
)
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store.fake import FakeStore
from slurm_ml.store.records import HealthEvent, derive_key

CFG = config(contracts={"preempt_cap_fraction": 1.0})
FINDING = {"gpu05": [NodeFinding("gpu05", "remap.pending", "gpu 0: row remap pending",
                                 NOW - 600)]}


def _nodes(**drained: str) -> list[Node]:
    return [replace(n, flags=n.flags | {"DRAIN"}, reason=drained[n.name])
            if n.name in drained else n for n in nodes(CFG)]


def _running(job_id: int, node: str = "gpu05", *, ran_s: int = 5 * HOUR,
             time_min: int | None = 60, **more: object) -> object:
    return job(job_id, "alice", "llm-pretrain", state=JobState.RUNNING, nodes=node,
               start=NOW - ran_s, time_min=time_min, **more)


def test_a_finding_on_an_undrained_node_drains_it_first_and_requeues_nothing_yet() -> None:
    rp = plan_repairs(NOW, _nodes(), [_running(1)], FINDING, CFG, budget_left=100,
                      breaker=_no_history())
    assert [d.node for d in rp.drains] == ["gpu05"]
    assert rp.drains[0].reason.startswith("slurm-ml: remap.pending")
    assert rp.requeues == ()
    assert rp.nodes[0].jobs[0].kind == "drain_first"


def test_a_drained_node_with_a_finding_requeues_the_job_after_its_protection() -> None:
    drained = _nodes(gpu05="slurm-ml: remap.pending (repair at the contract)")
    rp = plan_repairs(NOW, drained, [_running(1, ran_s=2 * HOUR, time_min=60)], FINDING, CFG,
                      budget_left=100)
    assert [r.job_id for r in rp.requeues] == [1]
    assert "repair at the contract: gpu05 drains after job for remap.pending" in \
        rp.requeues[0].reason
    assert "protected runtime ended at" in rp.requeues[0].reason
    assert rp.drains == ()


def test_not_before_its_protection_ends() -> None:
    drained = _nodes(gpu05="slurm-ml: remap.pending")
    rp = plan_repairs(NOW, drained, [_running(1, ran_s=30 * 60, time_min=60)], FINDING, CFG,
                      budget_left=100)
    assert rp.requeues == ()
    (wait,) = rp.nodes[0].jobs
    assert wait.kind == "protected"
    assert wait.until == NOW + 30 * 60
    assert rp.nodes[0].until == NOW + 30 * 60


def test_a_job_without_time_min_is_protected_for_the_cap() -> None:
    drained = _nodes(gpu05="slurm-ml: remap.pending")
    cap = CFG.policy.contracts.min_runtime_cap_min * 60
    rp = plan_repairs(NOW, drained, [_running(1, ran_s=HOUR, time_min=None)], FINDING, CFG)
    assert rp.requeues == ()
    assert rp.nodes[0].jobs[0].until == NOW - HOUR + cap


@pytest.mark.parametrize("more", [{"requeue": False}, {"batch": False}])
def test_a_job_that_cannot_resume_runs_to_its_end(more: dict[str, bool]) -> None:
    drained = _nodes(gpu05="slurm-ml: remap.pending")
    rp = plan_repairs(NOW, drained, [_running(1, **more)], FINDING, CFG, budget_left=100)
    assert rp.requeues == ()
    assert rp.nodes[0].jobs[0].kind == "finishes"


def test_an_admin_maintenance_drain_is_repaired_at_the_contract() -> None:
    drained = _nodes(gpu05="PSU Maintenance ticket 4411")
    rp = plan_repairs(NOW, drained, [_running(1)], {}, CFG, budget_left=100)
    assert [r.job_id for r in rp.requeues] == [1]
    assert rp.nodes[0].cause == "maintenance"
    assert rp.drains == ()  # the admin's drain stays the admin's


def test_other_admin_drains_are_left_alone() -> None:
    drained = _nodes(gpu05="bad cable, do not touch")
    rp = plan_repairs(NOW, drained, [_running(1)], {}, CFG, budget_left=100)
    assert rp.requeues == () and rp.nodes == ()


def test_a_cpu_job_on_a_maintenance_node_is_not_the_contracts_to_requeue() -> None:
    drained = _nodes(gpu05="maintenance")
    cpu = replace(_running(1), gpus=())  # type: ignore[type-var]
    assert plan_repairs(NOW, drained, [cpu], {}, CFG, budget_left=100).nodes == ()


def test_maintenance_patterns_are_case_insensitive_regexes_and_skip_owned_drains() -> None:
    assert maintenance_match("REPAIR: fan", ("repair",)) == "repair"
    assert maintenance_match("dimm swap", (r"^dimm\s",)) == r"^dimm\s"
    assert maintenance_match("slurm-ml: maintenance", ("maint",)) is None
    assert maintenance_match("unrelated", ("maint",)) is None


def test_the_preemption_cap_bounds_repair_requeues() -> None:
    drained = _nodes(gpu05="maintenance", gpu06="maintenance")
    jobs = [_running(1, "gpu05"), _running(2, "gpu06")]
    rp = plan_repairs(NOW, drained, jobs, {}, CFG, budget_left=4)
    assert [r.job_id for r in rp.requeues] == [1]
    assert [w.kind for n in rp.nodes for w in n.jobs] == ["requeue", "capped"]
    assert plan_repairs(NOW, drained, jobs, {}, CFG, budget_left=0).requeues == ()


def test_a_clean_check_ends_a_finding() -> None:
    ev = [NodeEvent("gpu05", "remap.pending", "drain_after_job", "m", NOW - 300),
          NodeEvent("gpu06", "remap.pending", "drain_after_job", "m", NOW - 300),
          NodeEvent("gpu06", "health.pass", "pass", "ok", NOW - 100),
          NodeEvent("gpu04", "pcie.link", "flag", "m", NOW - 100)]
    assert list(current_findings(ev)) == ["gpu05"]


def test_an_open_breaker_alarm_refuses_the_drain_and_so_the_requeue() -> None:
    from slurm_ml.policy.quarantine import Alarm
    from slurm_ml.policy.repairs import BreakerView

    cls = CFG.node_class_of("gpu05")
    assert cls is not None
    at = datetime.fromtimestamp(NOW - 60, UTC)
    breaker = BreakerView(alarms=(Alarm(cls.name, at, ("gpu06",), "gpu04"),))
    rp = plan_repairs(NOW, _nodes(), [_running(1)], FINDING, CFG, budget_left=100,
                      breaker=breaker)
    assert rp.drains == () and rp.requeues == ()
    assert rp.nodes[0].jobs[0].kind == "breaker"


def _drain_now(at: int) -> dict[str, list[NodeFinding]]:
    return {"gpu05": [NodeFinding("gpu05", "nvlink.active_links", "gpu6 (0/12 active)", at,
                                  "drain")]}


def test_a_fresh_drain_now_finding_is_left_to_the_hook_that_drains_for_it() -> None:
    # The prolog records its finding, then drains through the breakers; with the job
    # already RUNNING (PrologFlags=Alloc), a cycle in between must not drain it first
    # with another reason.
    for age in (0, HOOK_DRAIN_GRACE_S - 1):
        rp = plan_repairs(NOW, _nodes(), [_running(1)], _drain_now(NOW - age), CFG,
                          budget_left=100, breaker=_no_history())
        assert rp == RepairPlan((), (), ()), age


def test_a_drain_now_finding_the_hook_did_not_act_on_is_the_repairs_after_the_grace() -> None:
    rp = plan_repairs(NOW, _nodes(), [_running(1)], _drain_now(NOW - HOOK_DRAIN_GRACE_S),
                      CFG, budget_left=100, breaker=_no_history())
    assert [d.node for d in rp.drains] == ["gpu05"]
    assert rp.drains[0].reason.startswith("slurm-ml: nvlink.active_links")


def test_a_drained_node_with_a_fresh_drain_now_finding_is_repaired_at_once() -> None:
    drained = _nodes(gpu05="slurm-ml: nvlink.active_links gpu6 (0/12 active)")
    rp = plan_repairs(NOW, drained, [_running(1, ran_s=2 * HOUR)], _drain_now(NOW), CFG,
                      budget_left=100)
    assert [r.job_id for r in rp.requeues] == [1]


def test_a_fresh_drain_after_job_finding_drains_at_once() -> None:
    rp = plan_repairs(NOW, _nodes(), [_running(1)],
                      {"gpu05": [replace(FINDING["gpu05"][0], at=NOW)]}, CFG,
                      budget_left=100, breaker=_no_history())
    assert [d.node for d in rp.drains] == ["gpu05"]


def test_current_findings_keep_the_severity() -> None:
    ev = [NodeEvent("gpu05", "nvlink.active_links", "drain", "m", NOW - 5)]
    assert current_findings(ev)["gpu05"][0].severity == "drain"


def test_config_refuses_a_bad_maintenance_pattern() -> None:
    with pytest.raises(ConfigError, match="maintenance_reasons"):
        config(quarantine={"maintenance_reasons": ["(unclosed"]})
    assert config(quarantine={"maintenance_reasons": []}).policy.quarantine \
        .maintenance_reasons == ()


def _no_history() -> object:
    from slurm_ml.policy.repairs import BreakerView
    return BreakerView()


def _finding_event(node: str, at: int) -> HealthEvent:
    return HealthEvent(idempotency_key=derive_key("t", node, at), node=node,
                       check_id="remap.pending", severity="drain_after_job",
                       message=f"{node}: row remap pending", observed_at=datetime.fromtimestamp(at, UTC),
                       details={"hook": "periodic", "run": f"r{at}"})


def test_the_daemon_drains_owned_then_requeues_and_the_periodic_path_can_resume() -> None:
    slurm = FakeSlurm(nodes(CFG), batch_size=500)
    slurm.add_job(_running(1, ran_s=2 * HOUR, time_min=60))
    store = FakeStore()
    store.record_health_event(_finding_event("gpu05", NOW - 120))
    d = daemon(slurm, store, cfg=CFG, clock=lambda: NOW)
    d.cycle()
    assert slurm.nodes["gpu05"].drained
    assert slurm.nodes["gpu05"].reason.startswith("slurm-ml: remap.pending")
    assert slurm.jobs[1].state == JobState.RUNNING  # drained first
    # the drain is audited as the hooks' are: the periodic check finds it and resumes
    drains = [e for e in store.audit_entries() if e.action == "drain" and e.target == "gpu05"]
    assert drains
    d.clock = lambda: NOW + 60
    d.cycle()
    assert slurm.jobs[1].state == JobState.PENDING
    kinds = [x.kind for x in store.decisions_for_job(1)]
    assert "repair_requeue" in kinds


def test_plan_cycle_waits_for_a_protected_job() -> None:
    slurm = FakeSlurm(_nodes(gpu05="slurm-ml: remap.pending"), batch_size=500)
    slurm.add_job(_running(1, ran_s=10 * 60, time_min=60))
    store = FakeStore()
    store.record_health_event(_finding_event("gpu05", NOW - 120))
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    assert not [a for a in plan.actions if a.decision == "repair_requeue"]
    later = plan_cycle(CFG, observe(CFG, slurm, store, NOW + 50 * 60))
    assert [a.job_id for a in later.actions if a.decision == "repair_requeue"] == [1]


def test_finding_to_drain_to_requeue_to_resume_with_no_hand() -> None:
    """The periodic check defers a finding on a busy node; the daemon drains the node
    (owned), requeues the job once its protection has ended, and clean periodic checks
    then resume the node."""
    from dataclasses import replace as swap

    from hooks_helpers import CFG as HCFG
    from hooks_helpers import NOW as HNOW
    from hooks_helpers import fake_slurm, later, nvlink_down, probe, snapshot

    from slurm_ml.hooks.periodic import run_periodic

    cfg = swap(HCFG, policy=swap(HCFG.policy, contracts=swap(
        HCFG.policy.contracts, requeue_grace_s=0.0, preempt_cap_fraction=1.0)))
    t0 = int(HNOW.timestamp())
    slurm, store = fake_slurm(), FakeStore()
    slurm.add_job(job(7, "alice", "llm-pretrain", gpus=8, gtype="a100-40g",
                      state=JobState.RUNNING, nodes="gpu03", start=t0 - 30 * 60, time_min=40))

    def check(minutes: float, snap: object) -> str:
        return run_periodic("gpu03", cfg=cfg, probe=probe(snap), slurm=slurm,  # type: ignore[arg-type]
                            store=store, now=later(minutes)).action

    assert check(0, nvlink_down()) == "deferred"
    d = daemon(slurm, store, cfg=cfg, clock=lambda: t0 + 60)
    d.cycle()
    assert slurm.nodes["gpu03"].drained and slurm.jobs[7].state == JobState.RUNNING
    d.clock = lambda: t0 + 120
    d.cycle()  # drained, but job 7 is protected for 10 more minutes
    assert slurm.jobs[7].state == JobState.RUNNING
    d.clock = lambda: t0 + 11 * 60
    d.cycle()
    assert slurm.jobs[7].state == JobState.PENDING
    assert [check(m, snapshot()) for m in (15, 20, 25)] == ["held", "held", "resumed"]
    assert not slurm.nodes["gpu03"].drained


def test_quarantine_list_and_why_show_what_the_drain_waits_for_and_until_when() -> None:
    from slurm_ml.daemon.repair_view import repairs_for_job
    from slurm_ml.ops import report
    from slurm_ml.ops.quarantine import list_quarantine

    slurm = FakeSlurm(_nodes(gpu05="slurm-ml: remap.pending"), batch_size=500)
    slurm.add_job(_running(1, ran_s=10 * 60, time_min=60))
    store = FakeStore()
    store.record_health_event(_finding_event("gpu05", NOW - 120))
    view = list_quarantine(cfg=CFG, slurm=slurm, store=store,
                           now=datetime.fromtimestamp(NOW, UTC))
    (r,) = view.repairs
    assert (r.node, r.until, r.jobs[0].job_id) == ("gpu05", NOW + 50 * 60, 1)
    doc = view.to_json()["repairs"][0]
    assert doc["jobs"][0]["kind"] == "protected"
    assert doc["until"] == datetime.fromtimestamp(NOW + 50 * 60, UTC).isoformat()

    reps = repairs_for_job(CFG, list(slurm.nodes.values()), list(slurm.jobs.values()),
                           store.health_events_since(datetime.fromtimestamp(NOW - 3600, UTC)),
                           job_id=1, now=NOW)
    text = report.why_text(report.why_json(1, slurm.jobs[1], None, None, [], repairs=reps))
    assert "Repair at the contract: gpu05 drains after job for remap.pending: job 1 is " \
           "protected until" in text
