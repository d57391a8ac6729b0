"""The periodic health check: pass events, drains of idle nodes, samples, auto-resume."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hooks_helpers import (
    CFG,
    NOW,
    HangingProbe,
    env,
    fake_slurm,
    later,
    nvlink_down,
    probe,
    slurm_node,
    snapshot,
    with_processes,
)

from slurm_ml.health.snapshot import NodeSnapshot
from slurm_ml.hooks.periodic import ORPHAN_CHECK, PeriodicOutcome, run_periodic
from slurm_ml.hooks.procs_fake import FakeProc, FakeProcessTable
from slurm_ml.hooks.prolog import run_prolog
from slurm_ml.model import Job
from slurm_ml.slurm.errors import SlurmCommandError
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.slurm.protocol import SubmitRequest
from slurm_ml.store import AuditEntry, FakeStore, HealthEvent, UtilSample

OWNED = "slurm-ml: nvlink.active_links gpu3 (0/12 active)"


def periodic(snap: NodeSnapshot, slurm: FakeSlurm, store: FakeStore, minutes: float = 0,
             node: str = "gpu03", **kw: Any) -> PeriodicOutcome:
    return run_periodic(node, cfg=CFG, probe=probe(snap), slurm=slurm, store=store,
                        now=later(minutes), **kw)


def drained_by_prolog() -> tuple[FakeSlurm, FakeStore]:
    slurm, store = fake_slurm(), FakeStore()
    out = run_prolog(env(), cfg=CFG, probe=probe(nvlink_down()), slurm=slurm, store=store,
                     now=NOW)
    assert out.action == "drained"
    return slurm, store


def test_a_clean_node_records_one_pass() -> None:
    slurm, store = fake_slurm(), FakeStore()

    out = periodic(snapshot(), slurm, store)

    assert (out.action, out.passed) == ("pass", True)
    [event] = store.rows(HealthEvent)
    assert (event.check_id, event.severity, event.details["gpus"]) == ("health.pass", "pass", 8)


def test_flags_do_not_spoil_a_pass() -> None:
    slurm, store = fake_slurm(), FakeStore()
    out = periodic(snapshot(g2={"pcie_width_current": 8}), slurm, store)
    assert out.passed and {e.check_id for e in store.rows(HealthEvent)} == {"health.pass",
                                                                            "pcie.width"}


def test_an_idle_node_with_a_drain_finding_is_drained_through_the_breaker() -> None:
    slurm, store = fake_slurm(), FakeStore()

    out = periodic(nvlink_down(), slurm, store)

    assert (out.action, out.passed) == ("drained", False)
    assert slurm.nodes["gpu03"].reason == OWNED
    [entry] = [a for a in store.rows(AuditEntry) if a.action == "drain"]
    assert entry.actor == "slurm-ml/periodic" and entry.details["job_id"] is None


def test_a_busy_node_is_not_drained_the_finding_waits_for_the_epilog() -> None:
    slurm, store = fake_slurm(), FakeStore()
    slurm.start(slurm.submit(SubmitRequest(user="alice")), "gpu[03-04]", at=0)

    out = periodic(nvlink_down(), slurm, store)

    assert out.action == "deferred" and not slurm.nodes["gpu03"].drained
    [event] = store.rows(HealthEvent)
    assert (event.severity, event.details["check_severity"]) == ("drain_after_job", "drain")


def test_resume_after_n_clean_passes_since_the_drain() -> None:
    slurm, store = drained_by_prolog()
    need = CFG.policy.quarantine.resume_after_passes
    assert need == 3

    outs = [periodic(snapshot(), slurm, store, m) for m in (5, 10)]
    assert [(o.action, o.streak) for o in outs] == [("held", 1), ("held", 2)]
    assert slurm.nodes["gpu03"].drained

    last = periodic(snapshot(), slurm, store, 15)

    assert (last.action, last.streak) == ("resumed", 3)
    assert not slurm.nodes["gpu03"].drained
    [resume] = [a for a in store.rows(AuditEntry) if a.action == "resume"]
    assert (resume.actor, resume.target, resume.details["reason"]) == (
        "slurm-ml/periodic", "gpu03", OWNED)
    assert resume.details["streak"] == 3 and resume.details["results"] == [True] * 3


def test_a_failing_check_restarts_the_streak() -> None:
    slurm, store = drained_by_prolog()
    actions = [periodic(s, slurm, store, m).action for m, s in (
        (5, snapshot()), (10, snapshot()), (15, nvlink_down()), (20, snapshot()),
        (25, snapshot()), (30, snapshot()))]
    assert actions == ["held"] * 5 + ["resumed"]


def test_a_probe_timeout_is_not_a_pass() -> None:
    slurm, store = drained_by_prolog()
    for m in (5, 10):
        periodic(snapshot(), slurm, store, m)
    hung = HangingProbe()
    try:
        out = run_periodic("gpu03", cfg=CFG, probe=hung, slurm=slurm, store=store,
                           now=later(15), probe_timeout_s=0.05)
    finally:
        hung.release.set()
    assert (out.action, out.streak) == ("held", 0)


def test_an_admin_drain_is_never_resumed() -> None:
    slurm, store = fake_slurm(gpu03="admin: replacing a DIMM"), FakeStore()

    outs = [periodic(snapshot(), slurm, store, m) for m in range(0, 50, 5)]

    assert {o.action for o in outs} == {"foreign_drain"}
    assert slurm.nodes["gpu03"].reason == "admin: replacing a DIMM"
    assert not [c for c in slurm.calls if "State=RESUME" in c]


def test_an_owned_drain_without_a_drain_record_is_held() -> None:
    slurm, store = fake_slurm(gpu03=OWNED), FakeStore()  # someone typed our prefix by hand
    outs = [periodic(snapshot(), slurm, store, m) for m in range(0, 25, 5)]
    assert {o.action for o in outs} == {"held"} and slurm.nodes["gpu03"].drained


def test_database_down_never_resumes_and_never_raises() -> None:
    slurm, store = drained_by_prolog()
    for m in (5, 10):
        periodic(snapshot(), slurm, store, m)
    store.set_available(False)

    out = periodic(snapshot(), slurm, store, 15)

    assert out.action == "held" and out.store_errors and slurm.nodes["gpu03"].drained


def test_util_samples_per_job_gpu() -> None:
    slurm, store = fake_slurm(), FakeStore()
    a = slurm.submit(SubmitRequest(user="alice"))
    b = slurm.submit(SubmitRequest(user="bob"))
    slurm.start(a, "gpu03", at=0)
    slurm.start(b, "gpu03", at=0)
    procs = FakeProcessTable([FakeProc(10, f"0::/slurmstepd.scope/job_{a}/step_0"),
                              FakeProc(20, "", {"SLURM_JOB_ID": str(b)}),
                              FakeProc(30, "0::/user.slice")])
    snap = with_processes(snapshot(), g0=[(10, 20000)], g5=[(20, 1000)], g6=[(30, 5)])
    snap = replace(snap, gpus=tuple(replace(g, utilization_gpu_pct=float(g.index * 10))
                                    for g in snap.gpus))

    out = periodic(snap, slurm, store, procs=procs)

    assert out.samples_recorded == 2
    assert {(s.job_id, s.gpu_index, s.util_pct, s.mem_used_mb)
            for s in store.rows(UtilSample)} == {(a, 0, 0.0, 20000), (b, 5, 50.0, 1000)}


def test_util_samples_without_a_process_table_need_a_single_job() -> None:
    slurm, store = fake_slurm(), FakeStore()
    a = slurm.submit(SubmitRequest(user="alice"))
    slurm.start(a, "gpu03", at=0)
    snap = with_processes(snapshot(), g1=[(10, 4000)])

    assert periodic(snap, slurm, store).samples_recorded == 1
    b = slurm.submit(SubmitRequest(user="bob"))
    slurm.start(b, "gpu03", at=0)
    assert periodic(snap, slurm, store, 5).samples_recorded == 0


def test_unknown_node_is_skipped() -> None:
    out = periodic(snapshot(), fake_slurm(), FakeStore(), node="login01")
    assert out.action == "skipped"


# ------------------------------------------------------------ orphan GPU processes
# Job 1 runs on gpu03 (the checked node), job 2 on gpu04. Processes: 10 in job 1's cgroup,
# 11 with job 1's SLURM_JOB_ID only, 20 in job 2's cgroup (runs elsewhere), 30 in no job
# (USER=mallory), 31 in no job without an environment user, 40 already gone.
PROCS = [FakeProc(10, "0::/system.slice/slurmstepd.scope/job_1/step_0"),
         FakeProc(11, "", {"SLURM_JOB_ID": "1"}),
         FakeProc(20, "0::/system.slice/slurmstepd.scope/job_2/step_0", {"USER": "bob"}),
         FakeProc(30, "0::/user.slice/user-1099.slice", {"USER": "mallory"}),
         FakeProc(31, "0::/user.slice"),
         FakeProc(40, "0::/user.slice", {"USER": "eve"}, alive=False)]


def two_jobs() -> FakeSlurm:
    slurm = fake_slurm()
    for user, node in (("alice", "gpu03"), ("bob", "gpu04")):
        slurm.start(slurm.submit(SubmitRequest(user=user)), node, at=0)
    return slurm


ORPHAN_CASES = [
    pytest.param({"g0": [(10, 500)], "g1": [(11, 500)]}, {}, id="processes-of-the-job-here"),
    pytest.param({"g2": [(30, 700)]}, {2: ([30], ["mallory"], [])}, id="no-job-with-user"),
    pytest.param({"g3": [(31, 700)]}, {3: ([31], [], [])}, id="no-job-user-unknown"),
    pytest.param({"g4": [(20, 900)]}, {4: ([20], ["bob"], [2])}, id="job-running-elsewhere"),
    pytest.param({"g5": [(40, 100)]}, {}, id="process-already-gone"),
    pytest.param({"g6": [(10, 100), (31, 100), (30, 100)]}, {6: ([30, 31], ["mallory"], [])},
                 id="one-event-per-gpu-with-every-orphan-pid"),
]


@pytest.mark.parametrize(("per_gpu", "want"), ORPHAN_CASES)
def test_orphan_processes_are_flagged_per_gpu(
        per_gpu: dict[str, list[tuple[int, int]]],
        want: dict[int, tuple[list[int], list[str], list[int]]]) -> None:
    slurm, store = two_jobs(), FakeStore()

    out = periodic(with_processes(snapshot(), **per_gpu), slurm, store,
                   procs=FakeProcessTable(PROCS))

    events = [e for e in store.rows(HealthEvent) if e.check_id == ORPHAN_CHECK]
    assert {e.gpu_index: (e.details["pids"], e.details["users"], e.details["jobs"])
            for e in events} == want
    assert out.orphan_gpus == tuple(sorted(want))
    for e in events:
        assert e.severity == "flag" and e.details["gpu"] == e.gpu_index
        assert (e.details["hook"], e.details["run"]) == ("periodic", events[0].details["run"])
        assert f"gpu03: GPU {e.gpu_index} " in e.message
        assert all(str(p) in e.message for p in e.details["pids"])
        assert all(u in e.message for u in e.details["users"])
    assert out.action == "pass" and not slurm.nodes["gpu03"].drained


def test_an_orphan_on_an_idle_node_is_recorded_but_never_drains() -> None:
    slurm, store = fake_slurm(), FakeStore()
    snap = with_processes(snapshot(), g1=[(30, 2000)])

    out = periodic(snap, slurm, store, procs=FakeProcessTable(PROCS))

    assert (out.action, out.passed, out.orphan_gpus) == ("pass", True, (1,))
    assert not slurm.nodes["gpu03"].drained and not store.rows(AuditEntry)
    [orphan] = [e for e in store.rows(HealthEvent) if e.check_id == ORPHAN_CHECK]
    assert orphan.message == ("gpu03: GPU 1 runs 1 process(es) of mallory of no job on this "
                              "node: pid(s) 30")
    [passed] = [e for e in store.rows(HealthEvent) if e.check_id == "health.pass"]
    assert passed.details["flags"] == 1


def test_an_orphan_beside_a_drain_finding_leaves_the_drain_to_the_finding() -> None:
    slurm, store = fake_slurm(), FakeStore()
    snap = with_processes(nvlink_down(), g1=[(30, 2000)])
    out = periodic(snap, slurm, store, procs=FakeProcessTable(PROCS))
    assert (out.action, out.orphan_gpus) == ("drained", (1,))
    assert slurm.nodes["gpu03"].reason == OWNED


class JobsUnknown(FakeSlurm):
    def list_jobs(self, **_: Any) -> list[Job]:
        raise SlurmCommandError(("squeue",), 1, "Unable to contact slurm controller")


@pytest.mark.parametrize(("slurm", "procs"), [
    pytest.param(fake_slurm(), None, id="without-a-process-table"),
    pytest.param(JobsUnknown([slurm_node("gpu03")]), FakeProcessTable(PROCS),
                 id="slurm-did-not-say-which-jobs-run-here"),
])
def test_no_orphan_without_knowing_the_owners(slurm: FakeSlurm,
                                              procs: FakeProcessTable | None) -> None:
    store = FakeStore()
    out = periodic(with_processes(snapshot(), g2=[(30, 700)]), slurm, store, procs=procs)
    assert out.orphan_gpus == ()
    assert not [e for e in store.rows(HealthEvent) if e.check_id == ORPHAN_CHECK]


def test_a_rerun_of_the_same_run_records_the_orphan_once() -> None:
    slurm, store = fake_slurm(), FakeStore()
    snap = with_processes(snapshot(), g2=[(30, 700)])
    for _ in range(2):
        periodic(snap, slurm, store, procs=FakeProcessTable(PROCS))
    assert len([e for e in store.rows(HealthEvent) if e.check_id == ORPHAN_CHECK]) == 1
