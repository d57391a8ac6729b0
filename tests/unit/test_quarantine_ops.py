"""Operator quarantine actions (list, resume, reset) and the breakers the hooks drain
through (``hooks.breaker.drain_via_breaker``): per class, per check, and what a reset
does to their windows."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

import pytest
from hooks_helpers import CFG, NOW, env, fake_slurm, later, nvlink_down, probe, snapshot

from slurm_ml.config import Config
from slurm_ml.health.checks import Finding, Severity
from slurm_ml.hooks.breaker import DrainAction, drain_via_breaker
from slurm_ml.hooks.periodic import run_periodic
from slurm_ml.hooks.prolog import run_prolog
from slurm_ml.hooks.record import Recorder
from slurm_ml.ops.quarantine import (
    AuditNotWritten,
    QuarantineError,
    UnknownTarget,
    list_quarantine,
    reset_breaker,
    resume_node,
)
from slurm_ml.policy.quarantine import Scope
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store import AuditEntry, FakeStore
from slurm_ml.store.audit_log import drain_events, last_resets, open_alarms

ADMIN = "admin: replacing a DIMM"


def tripped() -> tuple[FakeSlurm, FakeStore]:
    """gpu03 drained by slurm-ml; gpu04's drain refused: the a100-40g breaker is open.
    gpu01 is drained by an admin."""
    slurm, store = fake_slurm(gpu01=ADMIN), FakeStore()
    for minute, node in ((0, "gpu03"), (1, "gpu04")):
        run_prolog(env(node, 10 + minute), cfg=CFG, probe=probe(nvlink_down(node)),
                   slurm=slurm, store=store, now=later(minute))
    return slurm, store


def test_list_shows_owned_drains_with_streaks_and_the_open_alarm() -> None:
    slurm, store = tripped()
    run_periodic("gpu03", cfg=CFG, probe=probe(snapshot()), slurm=slurm, store=store,
                 now=later(5))

    view = list_quarantine(cfg=CFG, slurm=slurm, store=store)

    [drain] = view.drains  # the admin's drain of gpu01 is not slurm-ml's
    assert (drain.node, drain.node_class, drain.drained_at, drain.streak, drain.needed) == (
        "gpu03", "a100-40g", NOW, 1, 3)
    [alarm] = view.alarms
    assert (alarm.node_class, alarm.refused, alarm.drained, alarm.at) == (
        "a100-40g", "gpu04", ("gpu03",), later(1))
    doc = view.to_json()
    assert json.loads(json.dumps(doc)) == doc and doc["store_ok"] is True


def test_reset_clears_the_alarm_and_starts_a_fresh_window() -> None:
    slurm, store = tripped()

    result = reset_breaker("a100-40g", cfg=CFG, store=store, now=later(10))

    assert (result.node_class, result.check, result.cleared) == ("a100-40g", None, 1)
    assert list_quarantine(cfg=CFG, slurm=slurm, store=store).alarms == ()
    [entry] = [a for a in store.rows(AuditEntry) if a.action == "breaker.reset"]
    assert (entry.actor, entry.target) == ("operator", "a100-40g")
    # gpu03 is still drained by slurm-ml, but since before the reset: it no longer counts
    out = run_prolog(env("gpu04", 99), cfg=CFG, probe=probe(nvlink_down("gpu04")),
                     slurm=slurm, store=store, now=later(11))
    assert out.action == "drained"
    # gpu04's drain after the reset does count: gpu03, repaired and failing again, trips it
    resume_node("gpu03", slurm=slurm, store=store, now=later(12))
    again = run_prolog(env("gpu03", 100), cfg=CFG, probe=probe(nvlink_down("gpu03")),
                       slurm=slurm, store=store, now=later(13))
    assert again.action == "refused"
    [alarm] = list_quarantine(cfg=CFG, slurm=slurm, store=store).alarms
    assert (alarm.node_class, alarm.drained, alarm.refused) == ("a100-40g", ("gpu04",), "gpu03")


@pytest.mark.parametrize("reset", [True, False], ids=["after-a-reset", "without-reset"])
def test_the_dev_cluster_bug_a_reset_class_drains_a_real_fault_again(reset: bool) -> None:
    """gpu04 drained and resumed, its class reset, then a real fault on gpu03: drained
    (it used to be refused: gpu04's drain from before the reset still counted)."""
    slurm, store = fake_slurm(), FakeStore()
    first = run_prolog(env("gpu04", 1), cfg=CFG, probe=probe(nvlink_down("gpu04")),
                       slurm=slurm, store=store, now=NOW)
    assert first.action == "drained"
    resume_node("gpu04", slurm=slurm, store=store, now=later(2))
    if reset:
        assert reset_breaker("a100-40g", cfg=CFG, store=store, now=later(3)).cleared == 0

    out = run_prolog(env("gpu03", 2), cfg=CFG, probe=probe(nvlink_down("gpu03")),
                     slurm=slurm, store=store, now=later(4))

    assert out.action == ("drained" if reset else "refused")
    assert slurm.nodes["gpu03"].drained is reset


@pytest.mark.parametrize(("node_class", "check", "match"), [
    ("h100", None, "no node class 'h100'"),
    (None, "nvlink", "'nvlink' is not a check id"),
    (None, "xid.79; drop", "is not a check id"),
    ("a100-40g", "xid.79", "not both"),
    (None, None, "name a node class or a check"),
], ids=["unknown-class", "undotted-check", "junk-check", "both", "neither"])
def test_reset_of_an_unknown_target_is_refused(node_class: str | None, check: str | None,
                                               match: str) -> None:
    store = FakeStore()
    with pytest.raises(UnknownTarget, match=match):
        reset_breaker(node_class, check=check, cfg=CFG, store=store, now=NOW)
    assert store.rows(AuditEntry) == []


def test_operator_resumes_an_owned_drain_with_an_audit_entry() -> None:
    slurm, store = tripped()

    result = resume_node("gpu03", slurm=slurm, store=store, now=later(20), actor="operator")

    assert (result.node, result.forced) == ("gpu03", False)
    assert result.previous_reason.startswith("slurm-ml: nvlink.active_links")
    assert not slurm.nodes["gpu03"].drained
    [entry] = [a for a in store.rows(AuditEntry) if a.action == "resume"]
    assert (entry.actor, entry.target, entry.details["owned"]) == ("operator", "gpu03", True)


def test_a_resume_whose_audit_fails_says_the_node_is_resumed() -> None:
    from slurm_ml.store.errors import SpoolError

    slurm, store = tripped()
    store.fail_next_writes(SpoolError("cannot append to spool /var/spool/slurm-ml: EACCES"))

    with pytest.raises(AuditNotWritten, match=r"resumed gpu03 \(was: slurm-ml: nvlink"):
        resume_node("gpu03", slurm=slurm, store=store, now=later(20))
    assert not slurm.nodes["gpu03"].drained  # done in Slurm; the message must say so


def test_an_admin_drain_needs_force() -> None:
    slurm, store = tripped()

    with pytest.raises(QuarantineError, match="drained by someone else"):
        resume_node("gpu01", slurm=slurm, store=store, now=NOW)
    assert slurm.nodes["gpu01"].drained

    result = resume_node("gpu01", slurm=slurm, store=store, now=NOW, force=True)
    assert result.forced and not slurm.nodes["gpu01"].drained
    [entry] = [a for a in store.rows(AuditEntry) if a.action == "resume"]
    assert entry.details == {"reason": ADMIN, "owned": False, "forced": True}


@pytest.mark.parametrize(("node", "match"), [("gpu02", "not drained"),
                                             ("gpu99", "no node gpu99")])
def test_resume_refuses_what_is_not_there(node: str, match: str) -> None:
    with pytest.raises(QuarantineError, match=match):
        resume_node(node, slurm=fake_slurm(), store=FakeStore(), now=NOW)


def test_list_with_the_database_down_still_shows_slurms_view() -> None:
    slurm, store = tripped()
    store.set_available(False)

    view = list_quarantine(cfg=CFG, slurm=slurm, store=store)

    assert [(d.node, d.drained_at, d.streak) for d in view.drains] == [("gpu03", None, None)]
    assert view.alarms == () and view.store_ok is False and view.errors


def test_list_with_slurm_down_still_shows_the_alarms(monkeypatch: pytest.MonkeyPatch,
                                                      ) -> None:
    from slurm_ml.slurm.errors import SlurmTimeout

    slurm, store = tripped()
    view = list_quarantine(cfg=CFG, slurm=slurm, store=store)
    assert view.slurm_ok

    def down() -> None:
        raise SlurmTimeout("scontrol show node timed out after 30 s")

    alarms = view.alarms
    assert alarms  # tripped(): the a100-40g breaker is open
    monkeypatch.setattr(slurm, "list_nodes", down)
    view = list_quarantine(cfg=CFG, slurm=slurm, store=store)
    assert view.slurm_ok is False and view.drains == () and view.repairs == ()
    assert view.alarms == alarms
    assert any("timed out" in e for e in view.errors)
    assert view.to_json()["slurm_ok"] is False and view.drains_ok is False

    monkeypatch.undo()  # the nodes answer, the jobs do not: the drains stand
    monkeypatch.setattr(slurm, "list_jobs", lambda *a, **k: down())
    view = list_quarantine(cfg=CFG, slurm=slurm, store=store)
    assert (view.slurm_ok, view.drains_ok) == (False, True)
    assert [d.node for d in view.drains] == ["gpu03"] and view.repairs == ()


# ------------------------------------------------------- the check breaker, end to end

NVL = "nvlink.active_links"
#: Class budgets of 2 (a whole 2-node class), so that only the check breaker trips below;
#: the fleet is 6 nodes: one check may drain max(2, floor(6 * 0.2)) = 2 per window.
WIDE = replace(CFG, policy=replace(CFG.policy, quarantine=replace(
    CFG.policy.quarantine, breaker_fraction=1.0)))


def finding(check: str, gpu: int = 3) -> Finding:
    return Finding(check, Severity.DRAIN_NOW, gpu, f"{check} on GPU {gpu}", detail="bad")


def drain(node: str, *checks: str, slurm: FakeSlurm, store: FakeStore, at: datetime,
          cfg: Config = WIDE) -> DrainAction:
    return drain_via_breaker(node, [finding(c) for c in checks], cfg=cfg, slurm=slurm,
                             rec=Recorder(store), now=at, hook="periodic")


def nvlink_everywhere() -> tuple[FakeSlurm, FakeStore]:
    """NVL drained gpu01 (a100-80g) and gpu03 (a100-40g): its budget of 2 is spent."""
    slurm, store = fake_slurm(), FakeStore()
    for minute, node in ((0, "gpu01"), (1, "gpu03")):
        assert drain(node, NVL, slurm=slurm, store=store, at=later(minute)).outcome == "drained"
    return slurm, store


def audit(store: FakeStore, action: str) -> list[AuditEntry]:
    return [a for a in store.rows(AuditEntry) if a.action == action]


def test_one_check_draining_several_classes_trips_its_breaker_and_names_it() -> None:
    slurm, store = nvlink_everywhere()

    out = drain("gpu05", NVL, slurm=slurm, store=store, at=later(2))

    assert out.outcome == "refused" and not slurm.nodes["gpu05"].drained
    assert out.set_aside == (NVL,)
    assert f"circuit breaker tripped for check {NVL}" in out.explanation
    assert f"slurm-ml quarantine reset --check {NVL}" in out.explanation
    assert out.alarm is not None and out.alarm.check == NVL and out.alarm.node_class is None
    [trip] = audit(store, "breaker.trip")
    assert (trip.target, trip.details["scope"], trip.details["check"]) == (
        f"check:{NVL}", "check", NVL)
    assert (trip.details["drained"], trip.details["refused"]) == (["gpu01", "gpu03"], "gpu05")
    [alarm] = list_quarantine(cfg=WIDE, slurm=slurm, store=store).alarms
    assert (alarm.check, alarm.node_class, alarm.drained) == (NVL, None, ("gpu01", "gpu03"))
    # while it is open, NVL drains nothing anywhere, and raises no second alarm
    again = drain("gpu06", NVL, slurm=slurm, store=store, at=later(3))
    assert again.outcome == "refused" and again.alarm is None
    assert f"circuit breaker open for check {NVL}" in again.explanation
    assert len(audit(store, "breaker.trip")) == 1


def test_other_checks_keep_draining_while_a_check_is_tripped() -> None:
    slurm, store = nvlink_everywhere()
    drain("gpu05", NVL, slurm=slurm, store=store, at=later(2))  # trips NVL

    out = drain_via_breaker("gpu06", [finding(NVL, 3), finding("xid.79", 1)], cfg=WIDE,
                            slurm=slurm, rec=Recorder(store), now=later(3), hook="periodic")

    assert out.outcome == "drained" and out.set_aside == (NVL,)
    assert out.reason == "slurm-ml: xid.79 gpu1 (bad)"  # what it was drained for, alone
    assert slurm.nodes["gpu06"].reason == out.reason
    entry = audit(store, "drain")[-1]
    assert entry.target == "gpu06" and entry.details["checks"] == ["xid.79"]
    assert [f["check_id"] for f in entry.details["findings"]] == ["xid.79"]
    [aside] = entry.details["set_aside"]
    assert aside["check"] == NVL and "circuit breaker open" in aside["why"]
    assert [f["check_id"] for f in aside["findings"]] == [NVL]
    # the drain counts for xid.79 only: NVL's window holds gpu01 and gpu03 still
    [event] = [e for e in drain_events(store.rows(AuditEntry), WIDE, NOW)
               if e.node == "gpu06"]
    assert event.checks == frozenset({"xid.79"})


def test_a_check_tripping_now_still_lets_the_other_checks_drain() -> None:
    slurm, store = nvlink_everywhere()

    out = drain("gpu05", NVL, "ecc.volatile_uncorrected", slurm=slurm, store=store,
                at=later(2))

    assert out.outcome == "drained" and out.set_aside == (NVL,)
    assert out.reason.startswith("slurm-ml: ecc.volatile_uncorrected")
    assert [a.check for a in out.alarms] == [NVL]
    assert [t.target for t in audit(store, "breaker.trip")] == [f"check:{NVL}"]


def test_the_class_breaker_still_applies_to_what_remains() -> None:
    slurm, store = nvlink_everywhere()  # gpu01 drained: a100-80g's budget under CFG is 1

    out = drain("gpu02", NVL, "xid.79", slurm=slurm, store=store, at=later(2), cfg=CFG)

    assert out.outcome == "refused" and out.set_aside == (NVL,)
    assert {a.scope for a in out.alarms} == {Scope.of_check(NVL), Scope.of_class("a100-80g")}
    assert out.reason.startswith("slurm-ml: xid.79")


def test_resetting_a_check_closes_its_alarm_and_starts_its_window_afresh() -> None:
    slurm, store = nvlink_everywhere()
    drain("gpu05", NVL, slurm=slurm, store=store, at=later(2))  # trips NVL

    wrong = reset_breaker("a100-80g", cfg=WIDE, store=store, now=later(4))
    result = reset_breaker(None, check=NVL, cfg=WIDE, store=store, now=later(5))

    assert wrong.cleared == 0  # a class reset leaves the check's alarm alone
    assert (result.node_class, result.check, result.cleared) == (None, NVL, 1)
    entry = audit(store, "breaker.reset")[-1]
    assert (entry.target, entry.details["scope"], entry.details["check"]) == (
        f"check:{NVL}", "check", NVL)
    assert list_quarantine(cfg=WIDE, slurm=slurm, store=store).alarms == ()
    # gpu01 and gpu03 drained for NVL before the reset: they no longer count for it
    assert drain("gpu05", NVL, slurm=slurm, store=store, at=later(6)).outcome == "drained"
    assert drain("gpu02", NVL, slurm=slurm, store=store, at=later(7)).outcome == "drained"
    third = drain("gpu06", NVL, slurm=slurm, store=store, at=later(8))
    assert third.outcome == "refused" and third.alarm is not None
    assert third.alarm.drained == ("gpu02", "gpu05")


def test_list_and_its_json_show_a_check_alarm() -> None:
    slurm, store = nvlink_everywhere()
    drain("gpu05", NVL, slurm=slurm, store=store, at=later(2))

    doc = list_quarantine(cfg=WIDE, slurm=slurm, store=store).to_json()

    [alarm] = doc["alarms"]
    assert alarm == {"scope": "check", "node_class": None, "check": NVL,
                     "at": later(2).isoformat(), "drained": ["gpu01", "gpu03"],
                     "refused": "gpu05", "reset": f"slurm-ml quarantine reset --check {NVL}"}
    assert json.loads(json.dumps(doc)) == doc


def test_a_slurm_drain_without_audit_counts_as_now_even_after_a_reset() -> None:
    slurm, store = fake_slurm(gpu03="slurm-ml: xid.79 gpu2 (fallen off the bus)"), FakeStore()
    reset_breaker("a100-40g", cfg=CFG, store=store, now=later(1))

    assert drain("gpu04", NVL, slurm=slurm, store=store, at=later(2),
                 cfg=CFG).outcome == "refused"


# ------------------------------------------- audit entries from before check breakers

OLD = [  # what a slurm-ml without check breakers wrote
    AuditEntry(idempotency_key="k1", actor="slurm-ml/prolog", action="drain", target="gpu03",
               at=NOW, details={"node_class": "a100-40g", "reason": "slurm-ml: xid.79 gpu2",
                                "findings": [{"check_id": "xid.79", "severity": "drain"},
                                             {"check_id": "probe.missing",
                                              "severity": "flag"}]}),
    AuditEntry(idempotency_key="k2", actor="slurm-ml/prolog", action="breaker.trip",
               target="a100-40g", at=later(1),
               details={"node": "gpu04", "drained": ["gpu03"], "refused": "gpu04"}),
]
OLD_RESET = AuditEntry(idempotency_key="k3", actor="operator", action="breaker.reset",
                       target="a100-40g", at=later(2), details={"open_alarms": 1})


def test_old_audit_entries_read_as_class_entries() -> None:
    [alarm] = open_alarms(OLD)
    [event] = drain_events(OLD, CFG, NOW)

    assert (alarm.node_class, alarm.check, alarm.scope) == (
        "a100-40g", None, Scope.of_class("a100-40g"))
    assert (alarm.drained, alarm.refused) == (("gpu03",), "gpu04")
    assert event.checks == frozenset({"xid.79"})  # from its drain-severity findings
    assert open_alarms([*OLD, OLD_RESET]) == []
    assert last_resets([*OLD, OLD_RESET]) == {Scope.of_class("a100-40g"): later(2)}


def test_a_new_class_reset_closes_an_old_class_alarm() -> None:
    store = FakeStore()
    for e in OLD:
        store.audit(e)

    assert reset_breaker("a100-40g", cfg=CFG, store=store, now=later(5)).cleared == 1
    assert open_alarms(store.rows(AuditEntry)) == []


def test_the_last_reset_of_a_scope_starts_its_window() -> None:
    store = FakeStore()
    for minute in (1, 5):
        reset_breaker("a100-40g", cfg=CFG, store=store, now=later(minute))
    reset_breaker(None, check=NVL, cfg=CFG, store=store, now=later(3))

    assert last_resets(store.rows(AuditEntry)) == {Scope.of_class("a100-40g"): later(5),
                                                   Scope.of_check(NVL): later(3)}
