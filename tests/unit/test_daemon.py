"""The daemon's cycle over the stateful fakes: what it pushes, what it records first, and
what it refuses to do when it cannot record, is not the leader, or is told to dry-run."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from daemon_helpers import CFG, EXAMPLE, NOW, config, daemon, mutations, nodes, usage, world

from slurm_ml.config import load_config
from slurm_ml.daemon.apply import Applier
from slurm_ml.daemon.loop import Daemon
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import plan_cycle
from slurm_ml.model import Job, JobState
from slurm_ml.slurm.errors import SlurmTimeout
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store.errors import StoreUnavailable
from slurm_ml.store.fake import FakeStore
from slurm_ml.store.leader import FakeLeaderLock, FakeLockTable
from slurm_ml.store.records import AuditEntry, ReconcilerDecision, UtilSample, derive_key

HOUR = 3600


# ------------------------------------------------------------------ one cycle


def test_cycle_ranks_the_starved_program_first_and_requeues_only_the_resumable_job() -> None:
    slurm, store = world(), FakeStore()
    result = daemon(slurm, store).cycle()

    assert result.outcome == "acted", result
    assert slurm.jobs[20].site_factor > slurm.jobs[21].site_factor > 0
    assert result.report is not None
    assert [(a.decision, a.job_id) for a in result.report.applied] == [("requeue", 1)]
    assert slurm.jobs[1].state == JobState.PENDING and slurm.jobs[2].state == JobState.RUNNING
    decisions = store.decisions_for_job(1)
    assert [d.kind for d in decisions] == ["requeue"] and not decisions[0].dry_run
    assert "job 20" in decisions[0].reason
    actions = [(e.action, e.details.get("phase")) for e in store.audit_entries()]
    assert actions == [("requeue", "intent"), ("requeue", "done")]
    assert {s.account for s in store.latest_budget_snapshots()} >= {"ml", "nlp", "detection"}


def test_second_cycle_pushes_nothing_it_already_pushed() -> None:
    slurm, store = world(), FakeStore()
    d = daemon(slurm, store)
    d.cycle()
    before = len(mutations(slurm))
    second = d.cycle()

    assert second.report is not None and second.report.site_factor_jobs <= 1  # job 1 re-pends
    assert not second.report.applied  # job 1 is in cooldown, job 2 is not resumable
    assert len(mutations(slurm)) - before <= 1


def test_dry_run_records_what_it_would_do_and_changes_nothing() -> None:
    slurm, store = world(), FakeStore()
    result = daemon(slurm, store, dry_run=True).cycle()

    assert result.outcome == "dry_run"
    assert mutations(slurm) == []
    assert slurm.jobs[1].state == JobState.RUNNING
    assert [(d.kind, d.dry_run) for d in store.decisions_for_job(1)] == [("requeue", True)]
    assert store.audit_entries() == []
    assert store.latest_budget_snapshots() == []  # submitd must not see a dry run's numbers


def test_database_down_means_no_action_at_all() -> None:
    slurm, store = world(), FakeStore()
    store.set_available(False)
    result = daemon(slurm, store).cycle()

    assert result.outcome == "store_unavailable"
    assert mutations(slurm) == []


class DownSlurm(FakeSlurm):
    def list_jobs(self, **_kw: Any) -> list[Job]:
        raise SlurmTimeout(("squeue",), 30)


def test_slurm_down_backs_off_exponentially_without_acting() -> None:
    slurm, store = DownSlurm(nodes()), FakeStore()
    d = daemon(slurm, store)
    waits = []
    for _ in range(12):
        result = d.cycle()
        waits.append(d.next_wait())
    assert result.outcome == "slurm_unavailable"
    assert waits[:4] == [60, 120, 240, 480] and max(waits) == CFG.daemon.backoff_max_s
    assert mutations(slurm) == [] and store.decisions_since(datetime(2000, 1, 1, tzinfo=UTC)) == []


def test_second_daemon_is_passive_until_the_leader_goes() -> None:
    slurm, store, table = world(), FakeStore(), FakeLockTable()
    first, second = daemon(slurm, store, table), daemon(slurm, store, table)

    assert first.cycle().outcome == "acted"
    passive = second.cycle()
    assert passive.outcome == "passive" and passive.plan is None
    first.close()
    assert second.cycle().outcome == "acted"


def test_losing_the_lock_mid_cycle_stops_before_the_next_action() -> None:
    slurm, store = world(), FakeStore()
    cfg = CFG
    obs = observe(cfg, slurm, store, NOW)
    plan = plan_cycle(cfg, obs)
    assert plan.actions
    report = Applier(slurm, store, still_leader=lambda: False).apply(plan)

    assert report.stopped == "lost the leader lock" and not report.applied
    assert mutations(slurm) == []


# ------------------------------------------------------------------ never act twice


class Crash(Exception):
    pass


def _crash(_action: object) -> None:
    raise Crash


def test_crash_after_the_intent_then_restart_applies_exactly_once() -> None:
    slurm, store = world(), FakeStore()
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    with pytest.raises(Crash):
        Applier(slurm, store, after_intent=_crash).apply(plan)
    assert slurm.jobs[1].state == JobState.RUNNING  # died between intent and action

    again = plan_cycle(CFG, observe(CFG, slurm, store, NOW + 60))
    report = Applier(slurm, store).apply(again)
    assert [a.job_id for a in report.applied] == [1]
    requeues = [c for c in slurm.calls if c[:2] == ("scontrol", "requeue")]
    assert len(requeues) == 1
    keys = [e.idempotency_key for e in store.audit_entries()]
    assert len(keys) == 2 and keys[1] == keys[0] + "/done"

    third = plan_cycle(CFG, observe(CFG, slurm, store, NOW + 120))
    Applier(slurm, store).apply(third)
    assert len([c for c in slurm.calls if c[:2] == ("scontrol", "requeue")]) == 1


def test_the_daemon_runs_its_after_intent_hook_between_intent_and_action() -> None:
    """The injection point tests/integration/paused_daemon.py uses to stop a real daemon
    between the two (slurm-ml has no setting for it)."""
    slurm, store = world(), FakeStore()
    seen: list[tuple[int | None, list[str], JobState]] = []

    def hook(action: Any) -> None:
        keys = [e.idempotency_key for e in store.audit_entries()]
        seen.append((action.job_id, keys, slurm.jobs[1].state))

    lock = FakeLeaderLock(FakeLockTable(), CFG.daemon.lock_key)
    result = Daemon(CFG, slurm=slurm, store=store, lock=lock, clock=lambda: NOW,
                    after_intent=hook).cycle()
    assert result.report is not None and [a.job_id for a in result.report.applied] == [1]
    assert len(seen) == 1
    job_id, keys, state = seen[0]
    assert job_id == 1 and len(keys) == 1 and state == JobState.RUNNING  # intent, no action


def test_an_action_already_done_is_skipped_not_repeated() -> None:
    slurm, store = world(), FakeStore()
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    action = plan.actions[0]
    store.audit(AuditEntry(idempotency_key=action.key, actor="x", action="requeue",
                           target="job 1", at=datetime.fromtimestamp(NOW, UTC)))
    store.audit(AuditEntry(idempotency_key=action.key + "/done", actor="x", action="requeue",
                           target="job 1", at=datetime.fromtimestamp(NOW, UTC)))
    report = Applier(slurm, store).apply(plan)

    assert report.already == [action] and not report.applied
    assert slurm.jobs[1].state == JobState.RUNNING


def test_a_spooled_intent_is_not_a_recorded_one() -> None:
    from slurm_ml.store.spool import SpoolingStore

    slurm, inner = world(), FakeStore()
    plan = plan_cycle(CFG, observe(CFG, slurm, inner, NOW))
    inner.set_available(False)
    with tempfile.TemporaryDirectory() as spool:
        report = Applier(slurm, SpoolingStore(inner, spool)).apply(plan)
    assert report.stopped.startswith("store") and not report.applied
    assert mutations(slurm) == []


# ------------------------------------------------------------------ reclaim


def _idle_samples(store: FakeStore, job_id: int, node: str, minutes: int = 15,
                  now: int = NOW) -> None:
    """Every GPU of a 4-GPU job idle with memory held, every 30 s for ``minutes``."""
    for k in range(minutes * 2 + 1):
        at = datetime.fromtimestamp(now, UTC) - timedelta(seconds=30 * k)
        for gpu in range(4):
            store.record_util_sample(UtilSample(
                idempotency_key=derive_key("t", job_id, gpu, at), job_id=job_id, node=node,
                gpu_index=gpu, sampled_at=at, util_pct=0.0, mem_used_mb=20_000))


def test_zombie_is_warned_then_requeued_after_the_grace_period() -> None:
    cfg = config(reclaim={"zombie_grace_s": 300})
    slurm, store = world(), FakeStore()
    slurm.jobs.pop(20)  # nobody starves: contracts stay out of it
    _idle_samples(store, 1, "gpu05")
    warned = daemon(slurm, store, cfg=cfg).cycle()
    assert warned.report is not None
    assert [(a.decision, a.job_id) for a in warned.report.applied] == [("zombie_warn", 1)]
    assert slurm.jobs[1].state == JobState.RUNNING

    _idle_samples(store, 1, "gpu05", minutes=1, now=NOW + 60)
    still = daemon(slurm, store, cfg=cfg, clock=lambda: NOW + 60).cycle()
    assert still.report is not None and not still.report.applied  # inside the grace

    later = NOW + 400
    _idle_samples(store, 1, "gpu05", minutes=15, now=later)
    acted = daemon(slurm, store, cfg=cfg, clock=lambda: later).cycle()
    assert acted.report is not None
    assert [(a.decision, a.job_id) for a in acted.report.applied] == [("zombie_requeue", 1)]
    assert slurm.jobs[1].state == JobState.PENDING


def test_runaway_jobs_are_fixed_and_excluded_from_usage() -> None:
    cfg = config(reclaim={"fix_runaway": True})
    slurm, store = world(), FakeStore()
    slurm.usage.append(usage(99, "dave", "detection", gpus=8, gtype="a100_80g",
                             start=NOW - 48 * HOUR, end=None))
    slurm.runaway.add(99)
    result = daemon(slurm, store, cfg=cfg).cycle()

    assert result.report is not None
    fixed = [a for a in result.report.applied if a.decision == "fix_runaway"]
    assert len(fixed) == 1 and fixed[0].details["jobs"] == [99]
    assert slurm.list_runaway_jobs() == []
    assert result.plan is not None
    assert result.plan.fair.account("detection").delivered == 0  # type: ignore[union-attr]


def test_stuck_completing_job_drains_its_node_with_an_owned_reason() -> None:
    cfg = config(reclaim={"completing_timeout_s": 600})
    slurm, store = world(), FakeStore()
    slurm.completing(12, NOW - 1200)
    daemon(slurm, store, cfg=cfg).cycle()
    node = slurm.nodes["gpu03"]
    assert node.drained and node.reason.startswith("slurm-ml: ")
    assert "12" in node.reason


def test_orphan_report_drains_the_node() -> None:
    from slurm_ml.store.records import HealthEvent

    slurm, store = world(), FakeStore()
    store.record_health_event(HealthEvent(
        idempotency_key="orphan-1", node="gpu04", check_id="process.orphan", severity="flag",
        message="gpu04: GPU 2 runs pid 4242 of no job",
        observed_at=datetime.fromtimestamp(NOW - 60, UTC), gpu_index=2,
        details={"gpu": 2, "pids": [4242]}))
    daemon(slurm, store).cycle()
    assert slurm.nodes["gpu04"].drained
    assert "orphan" in slurm.nodes["gpu04"].reason


# ------------------------------------------------------------------ config reload


def test_bad_config_on_reload_keeps_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(EXAMPLE.read_text())
    d = daemon(world(), FakeStore(), config_path=path)
    old = d.cfg
    path.write_text("cluster: [not, a, mapping]\n")
    d.reload_requested = True
    assert d.cycle().outcome == "acted"
    assert d.cfg is old

    good = yaml.safe_load(EXAMPLE.read_text())
    good["policy"]["fairshare"]["cycle_interval_s"] = 7
    path.write_text(yaml.safe_dump(good))
    assert d.reload() and d.cfg.policy.fairshare.cycle_interval_s == 7
    assert load_config(path) == d.cfg


def test_store_outage_during_leader_election_is_reported_not_raised() -> None:
    table = FakeLockTable()
    table.set_available(False)
    d = daemon(world(), FakeStore(), table)
    assert d.cycle().outcome == "store_unavailable"


def test_decisions_are_json_and_carry_the_cycle() -> None:
    slurm, store = world(), FakeStore()
    daemon(slurm, store).cycle()
    rows: list[ReconcilerDecision] = store.decisions_since(datetime(2000, 1, 1, tzinfo=UTC))
    assert {d.cycle for d in rows} == {NOW}
    with pytest.raises(StoreUnavailable):
        store.set_available(False)
        store.decisions_since(datetime(2000, 1, 1, tzinfo=UTC))


def test_metrics_count_cycles_actions_leadership_and_owed() -> None:
    from prometheus_client import generate_latest

    slurm, store = world(), FakeStore()
    d = daemon(slurm, store)
    d.cycle()
    text = generate_latest(d.metrics.registry).decode()

    assert 'slurm_ml_daemon_actions_total{kind="requeue",result="applied"} 1.0' in text
    assert "slurm_ml_daemon_leader 1.0" in text
    assert 'slurm_ml_daemon_cycles_total{outcome="acted"} 1.0' in text
    assert 'slurm_ml_allocation_owed_gpu_hours{account="detection"}' in text
    assert "slurm_ml_daemon_cycle_seconds_count 1.0" in text
    assert "slurm_ml_daemon_site_factor_updates_total" in text


def test_zombie_warning_runs_the_notify_command_with_json(tmp_path: Path) -> None:
    import json

    out = tmp_path / "warning.json"
    cfg = config(reclaim={"notify_command": f"sh -c 'cat > {out}'"})
    slurm, store = world(), FakeStore()
    slurm.jobs.pop(20)
    _idle_samples(store, 1, "gpu05")
    daemon(slurm, store, cfg=cfg).cycle()

    sent = json.loads(out.read_text())
    assert sent["job_id"] == 1 and sent["kind"] == "zombie_warn"
    assert "scancel 1" in sent["reason"]


def test_requeue_tells_the_notify_hook_after_it_happened() -> None:
    slurm, store = world(), FakeStore()
    told: list[tuple[str, int | None, str]] = []
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    Applier(slurm, store, notify=lambda a: told.append(
        (a.decision, a.job_id, slurm.jobs[a.job_id or 0].state.value))).apply(plan)
    assert told == [("requeue", 1, "PENDING")]


def test_a_job_that_woke_up_and_idles_again_is_warned_again() -> None:
    cfg = config(reclaim={"zombie_grace_s": 900})
    slurm, store = world(), FakeStore()
    slurm.jobs.pop(20)
    _idle_samples(store, 1, "gpu05")
    first = daemon(slurm, store, cfg=cfg).cycle()
    assert first.report is not None and [a.decision for a in first.report.applied] == [
        "zombie_warn"]
    # busy once at NOW + 100, then idle again for 16 min (the heartbeat is 15)
    busy = datetime.fromtimestamp(NOW + 100, UTC)
    for gpu in range(4):
        store.record_util_sample(UtilSample(
            idempotency_key=derive_key("busy", gpu), job_id=1, node="gpu05", gpu_index=gpu,
            sampled_at=busy, util_pct=90.0, mem_used_mb=20_000))
    later = NOW + 100 + 1000
    _idle_samples(store, 1, "gpu05", minutes=16, now=later)
    again = daemon(slurm, store, cfg=cfg, clock=lambda: later).cycle()
    assert again.report is not None
    assert [a.decision for a in again.report.applied] == ["zombie_warn"]
    assert slurm.jobs[1].state == JobState.RUNNING
    assert len([d for d in store.decisions_for_job(1) if d.kind == "zombie_warn"]) == 2


def test_a_lost_decision_row_is_written_when_the_action_is_found_done() -> None:
    slurm, store = world(), FakeStore()
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    action = plan.actions[0]
    for key in (action.key, action.key + "/done"):  # done, but its decision row was lost
        store.audit(AuditEntry(idempotency_key=key, actor="x", action="requeue",
                               target="job 1", at=datetime.fromtimestamp(NOW, UTC)))
    Applier(slurm, store).apply(plan)
    assert [d.kind for d in store.decisions_for_job(1)] == ["requeue"]


def test_a_deposed_leader_writes_no_snapshots() -> None:
    slurm, store = world(), FakeStore()
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    Applier(slurm, store, still_leader=lambda: False).apply(plan)
    assert store.latest_budget_snapshots() == []


def test_a_job_that_ended_before_its_requeue_is_not_run_again() -> None:
    slurm, store = world(), FakeStore()
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    slurm.completing(1, NOW)  # the job ended between the read and the requeue
    report = Applier(slurm, store).apply(plan)
    assert not report.applied and [a.job_id for a in report.already] == [1]
    assert not [c for c in slurm.calls if c[:2] == ("scontrol", "requeue")]
    assert store.decisions_for_job(1) == []


def test_a_job_sprio_does_not_list_gets_no_site_factor_push() -> None:
    from dataclasses import replace

    slurm, store = world(), FakeStore()
    slurm.jobs[20] = replace(slurm.jobs[20], site_factor=None)  # held: sprio skips it
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    assert 20 not in plan.changed and 21 in plan.changed
