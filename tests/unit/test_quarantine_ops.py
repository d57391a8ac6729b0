"""Operator quarantine actions: list, resume, reset."""

from __future__ import annotations

import json

import pytest
from hooks_helpers import CFG, NOW, env, fake_slurm, later, nvlink_down, probe, snapshot

from slurm_ml.hooks.periodic import run_periodic
from slurm_ml.hooks.prolog import run_prolog
from slurm_ml.hooks.quarantine_ops import (
    QuarantineError,
    list_quarantine,
    reset_breaker,
    resume_node,
)
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store import AuditEntry, FakeStore

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


def test_reset_clears_the_alarm_and_a_new_trip_raises_a_new_one() -> None:
    slurm, store = tripped()

    result = reset_breaker("a100-40g", cfg=CFG, store=store, now=later(10))

    assert result.cleared == 1
    assert list_quarantine(cfg=CFG, slurm=slurm, store=store).alarms == ()
    [entry] = [a for a in store.rows(AuditEntry) if a.action == "breaker.reset"]
    assert (entry.actor, entry.target) == ("operator", "a100-40g")
    # gpu03 is still drained by slurm-ml, so the class's budget is still used up
    out = run_prolog(env("gpu04", 99), cfg=CFG, probe=probe(nvlink_down("gpu04")),
                     slurm=slurm, store=store, now=later(11))
    assert out.action == "refused"
    assert len(list_quarantine(cfg=CFG, slurm=slurm, store=store).alarms) == 1


def test_reset_of_an_unknown_class_is_refused() -> None:
    with pytest.raises(QuarantineError, match="no node class 'h100'"):
        reset_breaker("h100", cfg=CFG, store=FakeStore(), now=NOW)


def test_operator_resumes_an_owned_drain_with_an_audit_entry() -> None:
    slurm, store = tripped()

    result = resume_node("gpu03", slurm=slurm, store=store, now=later(20), actor="operator")

    assert (result.node, result.forced) == ("gpu03", False)
    assert result.previous_reason.startswith("slurm-ml: nvlink.active_links")
    assert not slurm.nodes["gpu03"].drained
    [entry] = [a for a in store.rows(AuditEntry) if a.action == "resume"]
    assert (entry.actor, entry.target, entry.details["owned"]) == ("operator", "gpu03", True)


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
