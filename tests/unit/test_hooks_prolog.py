"""The prolog runner: check the job's GPUs, drain through the breaker, exit code."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from hooks_helpers import (
    CFG,
    NOW,
    HangingProbe,
    RaisingProbe,
    env,
    fake_slurm,
    later,
    nvlink_down,
    probe,
    snapshot,
)

from slurm_ml.config import Config
from slurm_ml.health.checks import Severity
from slurm_ml.health.snapshot import RemappedRows
from slurm_ml.hooks.jobenv import job_env, parse_gpu_list
from slurm_ml.hooks.prolog import run_prolog
from slurm_ml.model import Node
from slurm_ml.slurm.errors import SlurmTimeout
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store import AuditEntry, FakeStore, HealthEvent, SpoolingStore

A100_40G = "a100-40g"  # gpu03 and gpu04: a two-node class, so the breaker allows one drain


def budget(seconds: float) -> Config:
    q = replace(CFG.policy.quarantine, prolog_budget_s=seconds)
    return replace(CFG, policy=replace(CFG.policy, quarantine=q))


def drains(slurm: FakeSlurm) -> list[tuple[str, ...]]:
    return [c for c in slurm.calls if "State=DRAIN" in c]


def audit(store: FakeStore, action: str) -> list[AuditEntry]:
    return [a for a in store.rows(AuditEntry) if a.action == action]


# ---------------------------------------------------------------- environment


@pytest.mark.parametrize(("text", "gpus"), [
    ("0,1,2", (0, 1, 2)), ("3", (3,)), ("0-3", (0, 1, 2, 3)), ("2,0-1", (0, 1, 2)),
    ("", ()), ("NoDevFiles", ()), (" 1 , 2 ", (1, 2)),
    ("GPU-5b2c1c9e-0000", None), ("MIG-1/2/0", None), ("3-1", None),
])
def test_gpu_lists(text: str, gpus: tuple[int, ...] | None) -> None:
    assert parse_gpu_list(text) == gpus


def test_job_gpus_fall_back_to_cuda_visible_devices() -> None:
    e = env(gpus=None, CUDA_VISIBLE_DEVICES="4,5")
    assert job_env(e).gpus == (4, 5)
    assert job_env(env(gpus="1", CUDA_VISIBLE_DEVICES="4,5")).gpus == (1,)
    assert job_env(env(gpus=None)).gpus == ()


# ---------------------------------------------------------------- verdicts


def test_healthy_gpus_pass_with_exit_0_and_touch_nothing() -> None:
    slurm, store = fake_slurm(), FakeStore()

    out = run_prolog(env(), cfg=CFG, probe=probe(snapshot()), slurm=slurm, store=store,
                     now=NOW)

    assert (out.exit_code, out.action, out.findings) == (0, "pass", ())
    assert out.gpus == (0, 1, 2, 3)
    assert store.rows(HealthEvent) == [] and store.rows(AuditEntry) == []
    assert slurm.calls == []  # a healthy prolog does not even ask Slurm


def test_nvlink_down_drains_with_an_owned_reason_and_exits_1() -> None:
    slurm, store = fake_slurm(), FakeStore()

    out = run_prolog(env(), cfg=CFG, probe=probe(nvlink_down(gpu=3)), slurm=slurm,
                     store=store, now=NOW)

    assert (out.exit_code, out.action) == (1, "drained")
    node = slurm.nodes["gpu03"]
    assert node.drained
    assert node.reason == "slurm-ml: nvlink.active_links gpu3 (0/12 active)"
    [event] = store.rows(HealthEvent)
    assert (event.node, event.check_id, event.severity, event.gpu_index) == (
        "gpu03", "nvlink.active_links", "drain", 3)
    assert event.details["job_id"] == 42 and event.details["evidence"]["active"] == 0
    [entry] = audit(store, "drain")
    assert (entry.actor, entry.target) == ("slurm-ml/prolog", "gpu03")
    assert entry.details["reason"] == node.reason
    assert entry.details["job_id"] == 42 and entry.details["applied"] is True
    assert [f["check_id"] for f in entry.details["findings"]] == ["nvlink.active_links"]


def test_a_retried_prolog_records_nothing_twice() -> None:
    slurm, store = fake_slurm(), FakeStore()
    for _ in range(2):
        out = run_prolog(env(), cfg=CFG, probe=probe(nvlink_down()), slurm=slurm,
                         store=store, now=NOW)

    assert (out.exit_code, out.action) == (1, "already_drained")
    assert len(store.rows(HealthEvent)) == 1 and len(audit(store, "drain")) == 1
    assert len(drains(slurm)) == 1


def test_only_the_jobs_gpus_are_checked() -> None:
    slurm, store = fake_slurm(), FakeStore()

    out = run_prolog(env(gpus="0,1"), cfg=CFG, probe=probe(nvlink_down(gpu=3)), slurm=slurm,
                     store=store, now=NOW)

    assert (out.exit_code, out.action) == (0, "pass")
    assert not slurm.nodes["gpu03"].drained


def test_a_job_without_gpus_gets_the_node_level_checks_only() -> None:
    slurm, store = fake_slurm(), FakeStore()
    out = run_prolog(env(gpus=None), cfg=CFG, probe=probe(nvlink_down(gpu=3)), slurm=slurm,
                     store=store, now=NOW)
    assert (out.exit_code, out.action, out.gpus) == (0, "pass", ())

    lost = replace(snapshot(n=7), attached_gpus=7)  # a GPU fell off the bus
    out = run_prolog(env(gpus=""), cfg=CFG, probe=probe(lost), slurm=slurm, store=store,
                     now=NOW)
    assert (out.exit_code, out.action) == (1, "drained")
    assert slurm.nodes["gpu03"].reason.startswith("slurm-ml: gpu.count (7/8 GPUs)")


def test_drain_after_job_and_flags_are_recorded_only() -> None:
    slurm, store = fake_slurm(), FakeStore()
    pending = snapshot(g1={"remapped_rows": RemappedRows(0, 2, True, False)},
                       g2={"pcie_width_current": 8})

    out = run_prolog(env(), cfg=CFG, probe=probe(pending), slurm=slurm, store=store, now=NOW)

    assert (out.exit_code, out.action) == (0, "recorded")
    assert {(e.check_id, e.severity) for e in store.rows(HealthEvent)} == {
        ("remap.pending", "drain_after_job"), ("pcie.width", "flag")}
    assert not slurm.nodes["gpu03"].drained and store.rows(AuditEntry) == []


def test_nodes_outside_every_class_and_missing_environment_are_skipped() -> None:
    slurm, store = fake_slurm(), FakeStore()
    for e in (env(node="login01"), {"SLURM_JOB_ID": "1"}):
        out = run_prolog(e, cfg=CFG, probe=probe(nvlink_down()), slurm=slurm, store=store,
                         now=NOW)
        assert (out.exit_code, out.action) == (0, "skipped")
    assert slurm.calls == [] and store.rows(HealthEvent) == []


# ---------------------------------------------------------------- the breaker


def test_breaker_refuses_the_second_drain_of_a_two_node_class() -> None:
    slurm, store = fake_slurm(), FakeStore()
    first = run_prolog(env("gpu03", 1), cfg=CFG, probe=probe(nvlink_down("gpu03")),
                       slurm=slurm, store=store, now=NOW)
    second = run_prolog(env("gpu04", 2), cfg=CFG, probe=probe(nvlink_down("gpu04")),
                        slurm=slurm, store=store, now=later(1))
    third = run_prolog(env("gpu04", 3), cfg=CFG, probe=probe(nvlink_down("gpu04")),
                       slurm=slurm, store=store, now=later(2))

    assert (first.exit_code, first.action) == (1, "drained")
    assert (second.exit_code, second.action) == (0, "refused")
    assert (third.exit_code, third.action) == (0, "refused")
    assert not slurm.nodes["gpu04"].drained
    [trip] = audit(store, "breaker.trip")  # one alarm: the open alarm refuses the third
    assert (trip.target, trip.details["refused"], trip.details["drained"]) == (
        A100_40G, "gpu04", ["gpu03"])
    assert second.drain is not None and second.drain.alarm is not None
    assert third.drain is not None and third.drain.alarm is None
    assert "quarantine reset" in third.drain.explanation
    # the refused runs still recorded what they saw
    assert {e.node for e in store.rows(HealthEvent)} == {"gpu03", "gpu04"}


def test_breaker_counts_owned_drains_slurm_shows_even_without_history() -> None:
    slurm = fake_slurm(gpu03="slurm-ml: xid.79 gpu2 (fallen off the bus)")

    out = run_prolog(env("gpu04"), cfg=CFG, probe=probe(nvlink_down("gpu04")), slurm=slurm,
                     store=FakeStore(), now=NOW)

    assert (out.exit_code, out.action) == (0, "refused")


def test_an_admin_drain_does_not_use_the_breaker_budget() -> None:
    slurm = fake_slurm(gpu03="admin: replacing a DIMM")

    out = run_prolog(env("gpu04"), cfg=CFG, probe=probe(nvlink_down("gpu04")), slurm=slurm,
                     store=FakeStore(), now=NOW)

    assert (out.exit_code, out.action) == (1, "drained")


def test_a_node_drained_by_an_admin_keeps_its_reason_and_the_job_is_requeued() -> None:
    slurm, store = fake_slurm(gpu03="admin: replacing a DIMM"), FakeStore()

    out = run_prolog(env(), cfg=CFG, probe=probe(nvlink_down()), slurm=slurm, store=store,
                     now=NOW)

    assert (out.exit_code, out.action) == (1, "already_drained")
    assert slurm.nodes["gpu03"].reason == "admin: replacing a DIMM"
    assert drains(slurm) == [] and audit(store, "drain") == []


def test_old_drains_leave_the_window() -> None:
    slurm, store = fake_slurm(), FakeStore()
    run_prolog(env("gpu03", 1), cfg=CFG, probe=probe(nvlink_down("gpu03")), slurm=slurm,
               store=store, now=NOW)
    slurm.resume_node("gpu03")  # repaired and resumed: no longer counts as drained now

    out = run_prolog(env("gpu04", 2), cfg=CFG, probe=probe(nvlink_down("gpu04")),
                     slurm=slurm, store=store, now=later(31))

    assert (out.exit_code, out.action) == (1, "drained")


# ---------------------------------------------------------------- failures of the boundaries


def test_a_hung_probe_costs_the_budget_and_does_not_drain() -> None:
    slurm, store, hung = fake_slurm(), FakeStore(), HangingProbe()
    try:
        t0 = time.monotonic()
        out = run_prolog(env(), cfg=budget(0.2), probe=hung, slurm=slurm, store=store,
                         now=NOW)
        took = time.monotonic() - t0
    finally:
        hung.release.set()

    assert 0.2 <= took < 2.0
    assert (out.exit_code, out.action) == (0, "recorded")
    assert [(f.check_id, f.severity) for f in out.findings] == [("probe.timeout", Severity.FLAG)]
    assert [e.check_id for e in store.rows(HealthEvent)] == ["probe.timeout"]
    assert not slurm.nodes["gpu03"].drained


def test_a_probe_that_reports_its_own_failure_drains() -> None:
    slurm, store = fake_slurm(), FakeStore()
    wedged = replace(snapshot(), errors=("NVML watchdog: nvmlDeviceGetCount hung 4.0 s",))

    out = run_prolog(env(), cfg=CFG, probe=probe(wedged), slurm=slurm, store=store, now=NOW)

    assert (out.exit_code, out.action) == (1, "drained")
    assert slurm.nodes["gpu03"].reason.startswith("slurm-ml: probe.error")


def test_a_probe_that_raises_is_flagged_not_fatal() -> None:
    out = run_prolog(env(), cfg=CFG, probe=RaisingProbe(), slurm=fake_slurm(),
                     store=FakeStore(), now=NOW)

    assert (out.exit_code, out.action) == (0, "recorded")
    assert out.findings[0].check_id == "probe.failed"
    assert "capture unreadable" in out.findings[0].message


def test_database_down_still_drains_without_raising() -> None:
    slurm, store = fake_slurm(), FakeStore()
    store.set_available(False)

    out = run_prolog(env(), cfg=CFG, probe=probe(nvlink_down()), slurm=slurm, store=store,
                     now=NOW)

    assert (out.exit_code, out.action) == (1, "drained")
    assert slurm.nodes["gpu03"].reason.startswith("slurm-ml: nvlink.active_links gpu3")
    assert out.store_errors and all("unavailable" in e.lower() or "Unavailable" in e
                                    for e in out.store_errors)


def test_database_down_falls_back_to_slurms_drained_nodes_for_the_breaker() -> None:
    slurm, store = fake_slurm(gpu03="slurm-ml: nvlink.active_links gpu1"), FakeStore()
    store.set_available(False)

    out = run_prolog(env("gpu04"), cfg=CFG, probe=probe(nvlink_down("gpu04")), slurm=slurm,
                     store=store, now=NOW)

    assert (out.exit_code, out.action) == (0, "refused")


def test_with_a_spooling_store_the_records_land_after_the_outage(tmp_path: Path) -> None:
    inner, slurm = FakeStore(), fake_slurm()
    inner.set_available(False)
    store = SpoolingStore(inner, tmp_path / "spool")

    out = run_prolog(env(), cfg=CFG, probe=probe(nvlink_down()), slurm=slurm, store=store,
                     now=NOW)

    assert (out.exit_code, out.action) == (1, "drained")
    assert store.spool.pending_count() == 2  # the health event and the audit entry
    inner.set_available(True)
    store.drain()
    assert len(inner.rows(HealthEvent)) == 1 and len(audit(inner, "drain")) == 1


class SlurmDown(FakeSlurm):
    def __init__(self, nodes: list[Node], *, fail: set[str]) -> None:
        super().__init__(nodes)
        self.fail = fail

    def list_nodes(self) -> list[Node]:
        if "list" in self.fail:
            raise SlurmTimeout("scontrol show node: timed out after 5s")
        return super().list_nodes()

    def drain_node(self, node: str, reason: str) -> None:
        if "drain" in self.fail:
            raise SlurmTimeout("scontrol update: timed out after 5s")
        super().drain_node(node, reason)


@pytest.mark.parametrize("fail", ["drain", "list"])
def test_a_drain_slurm_did_not_take_still_fails_the_prolog(fail: str) -> None:
    """The breaker allowed the drain: Slurm's own "Prolog error" drain is the fallback."""
    slurm, store = SlurmDown(list(fake_slurm().nodes.values()), fail={fail}), FakeStore()

    out = run_prolog(env(), cfg=CFG, probe=probe(nvlink_down()), slurm=slurm, store=store,
                     now=NOW)

    assert (out.exit_code, out.action) == (1, "drain_failed")
    assert not slurm.nodes["gpu03"].drained
    [entry] = audit(store, "drain")
    assert entry.details["applied"] is False and "timed out" in entry.details["slurm_error"]
    if fail == "list":  # the node's state is unknown: never risk overwriting an admin reason
        assert drains(slurm) == []


def test_the_prolog_leaves_a_baseline_for_the_epilog(tmp_path: Path) -> None:
    run_prolog(env(), cfg=CFG, probe=probe(snapshot()), slurm=fake_slurm(), store=FakeStore(),
               now=NOW, baseline_dir=tmp_path)

    assert (tmp_path / "baseline-42.json").is_file()
