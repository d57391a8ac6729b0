"""The epilog runner: kill only the job's GPU processes, /dev/shm, stats, post-job drain."""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path
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
    snapshot,
    with_processes,
)

from slurm_ml.health.snapshot import NOT_SUPPORTED, EccCounts, NodeSnapshot, RemappedRows
from slurm_ml.hooks.baseline import load_baseline, save_baseline
from slurm_ml.hooks.epilog import EpilogOutcome, run_epilog
from slurm_ml.hooks.procs import ProcFs, job_of
from slurm_ml.hooks.procs_fake import FakeProc, FakeProcessTable
from slurm_ml.hooks.shm import clean_shm
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.slurm.protocol import SubmitRequest
from slurm_ml.store import AuditEntry, FakeStore, HealthEvent, JobGpuStats, UtilSample

ROOT = os.geteuid() == 0
#: The job user's uid: as root the tests chown files to it; otherwise it is ours.
UID = 1000 if ROOT else os.getuid()
OTHER_UID = 1001
JOB = 42


def cg(job: int) -> str:
    return f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def epilog(snap: NodeSnapshot, procs: FakeProcessTable, tmp_path: Path, *,
           slurm: FakeSlurm | None = None, store: FakeStore | None = None,
           sleep: Sleeps | None = None, environ: dict[str, str] | None = None,
           **kw: Any) -> EpilogOutcome:
    shm = tmp_path / "shm"
    shm.mkdir(exist_ok=True)
    return run_epilog(environ or env(job=JOB, SLURM_JOB_UID=str(UID)), cfg=CFG,
                      probe=probe(snap), slurm=slurm or fake_slurm(),
                      store=store or FakeStore(), procs=procs, now=NOW,
                      sleep=sleep or Sleeps(), shm_dir=shm, **kw)


def own(path: Path, uid: int = UID) -> Path:
    if ROOT:
        os.lchown(path, uid, uid)
    return path


def write(path: Path, uid: int = UID) -> Path:
    path.write_text("x")
    return own(path, uid)


def link(path: Path, target: Path, uid: int = UID) -> Path:
    path.symlink_to(target)
    return own(path, uid)


# ---------------------------------------------------------------- which processes


def test_job_of_prefers_the_cgroup_over_the_environment() -> None:
    procs = FakeProcessTable([
        FakeProc(10, cg(42)),
        FakeProc(11, "0::/user.slice/user-1000.slice/session-3.scope\n",
                 {"SLURM_JOB_ID": "42"}),
        FakeProc(12, cg(43), {"SLURM_JOB_ID": "42"}),  # job 42's env, job 43's cgroup
        FakeProc(13, "12:pids:/slurm/uid_1000/job_420/step_0\n"),  # job_420 is not job_42
        FakeProc(14, "", {"USER": "alice"}),
    ])

    assert [job_of(procs, p) for p in (10, 11, 12, 13, 14, 99)] == [42, 42, 43, 420, None,
                                                                     None]


def test_proc_fs_reads_cgroup_environ_and_zombies(tmp_path: Path) -> None:
    for pid, state in ((7, "S"), (8, "Z")):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "cgroup").write_text(cg(42))
        (d / "environ").write_bytes(b"SLURM_JOB_ID=42\0PATH=/bin\0")
        (d / "stat").write_text(f"{pid} (python (x)) {state} 1 2 3\n")
    fs = ProcFs(tmp_path)

    assert fs.cgroup(7) == cg(42) and fs.environ(7) == {"SLURM_JOB_ID": "42", "PATH": "/bin"}
    assert (fs.alive(7), fs.alive(8), fs.alive(9)) == (True, False, False)
    assert fs.cgroup(9) is None and fs.environ(9) is None
    with pytest.raises(ValueError):
        fs.kill(1, signal.SIGKILL)


def test_kills_only_this_jobs_processes_not_the_same_users_other_job(tmp_path: Path) -> None:
    procs = FakeProcessTable([
        FakeProc(100, cg(JOB)),  # the job's, by cgroup
        FakeProc(101, "", {"SLURM_JOB_ID": str(JOB)}),  # the job's, by environment only
        FakeProc(200, cg(43), {"SLURM_JOB_USER": "alice"}),  # alice's other job
        FakeProc(201, cg(43), {"SLURM_JOB_ID": str(JOB)}),  # inherited env, job 43's cgroup
    ])
    snap = with_processes(snapshot(), g0=[(100, 1000)], g1=[(101, 500)], g4=[(200, 7000)],
                          g5=[(201, 10)])

    out = epilog(snap, procs, tmp_path)

    assert out.exit_code == 0 and out.action == "clean"
    assert procs.signalled() == {100, 101}
    assert (out.kill.targets, out.kill.terminated, out.kill.survivors) == ((100, 101),
                                                                           (100, 101), ())
    assert out.kill.foreign == (200, 201)
    assert procs.alive(200) and procs.alive(201)


def test_sigterm_then_sigkill_after_the_wait(tmp_path: Path) -> None:
    procs = FakeProcessTable([FakeProc(100, cg(JOB), ignores_term=True)])
    sleeps = Sleeps()

    out = epilog(with_processes(snapshot(), g0=[(100, 1000)]), procs, tmp_path, sleep=sleeps,
                 term_wait_s=5.0)

    assert procs.signals == [(100, signal.SIGTERM), (100, signal.SIGKILL)]
    assert out.kill.killed == (100,) and out.drain is None
    assert sum(sleeps.calls) == pytest.approx(5.0)


def test_a_survivor_of_sigkill_drains_the_node_and_the_epilog_still_exits_0(
        tmp_path: Path) -> None:
    procs = FakeProcessTable([FakeProc(100, cg(JOB), unkillable=True)])
    slurm, store, sleeps = fake_slurm(), FakeStore(), Sleeps()

    out = epilog(with_processes(snapshot(), g2=[(100, 30000)]), procs, tmp_path, slurm=slurm,
                 store=store, sleep=sleeps)

    assert (out.exit_code, out.action, out.kill.survivors) == (0, "drained", (100,))
    assert slurm.nodes["gpu03"].reason == "slurm-ml: process.leftover gpu2 (1 pids survived SIGKILL)"
    [entry] = [a for a in store.rows(AuditEntry) if a.action == "drain"]
    assert entry.actor == "slurm-ml/epilog" and entry.details["job_id"] == JOB
    assert sum(sleeps.calls) == pytest.approx(7.0)  # 5 s after SIGTERM, 2 s after SIGKILL


def test_a_survivor_goes_through_the_breaker_too(tmp_path: Path) -> None:
    slurm = fake_slurm(gpu04="slurm-ml: xid.79 gpu0")  # the class's one drain is used
    procs = FakeProcessTable([FakeProc(100, cg(JOB), unkillable=True)])

    out = epilog(with_processes(snapshot(), g0=[(100, 1)]), procs, tmp_path, slurm=slurm)

    assert (out.exit_code, out.action) == (0, "refused")
    assert not slurm.nodes["gpu03"].drained


# ---------------------------------------------------------------- /dev/shm


def shm_tree(tmp_path: Path) -> tuple[Path, Path]:
    """The user's files, plus symlink traps pointing at a victim outside /dev/shm."""
    shm, victim = tmp_path / "shm", tmp_path / "victim"
    shm.mkdir()
    victim.mkdir()
    write(victim / "precious")  # even owned by the user: it is outside shm
    write(shm / "torch_shm_1")
    write(shm / "sem.lock")
    link(shm / "dirlink", victim)
    link(shm / "filelink", victim / "precious")
    d = shm / "nccl"
    d.mkdir()
    own(d)
    write(d / "seg0")
    link(d / "inner_link", victim)
    return shm, victim


def test_shm_removes_the_users_files_and_links_but_never_follows_them(tmp_path: Path) -> None:
    shm, victim = shm_tree(tmp_path)

    out = epilog(snapshot(), FakeProcessTable(), tmp_path)

    assert out.shm is not None and out.shm.ran and out.shm.errors == ()
    assert sorted(p.name for p in shm.iterdir()) == []
    assert (victim / "precious").read_text() == "x"
    assert {Path(p).name for p in out.shm.removed} == {
        "torch_shm_1", "sem.lock", "dirlink", "filelink", "seg0", "inner_link", "nccl"}


@pytest.mark.skipif(not ROOT, reason="needs root to own files as two users")
def test_shm_keeps_other_users_files_and_their_links(tmp_path: Path) -> None:
    shm, victim = shm_tree(tmp_path)
    write(shm / "bobs_file", OTHER_UID)
    link(shm / "bobs_link", victim, OTHER_UID)
    write(shm / "nccl" / "bobs_seg", OTHER_UID)
    bob_dir = shm / "bobs_dir"
    bob_dir.mkdir()
    own(bob_dir, OTHER_UID)
    write(bob_dir / "alices_file_in_bobs_dir")

    epilog(snapshot(), FakeProcessTable(), tmp_path)

    left = sorted(str(p.relative_to(shm)) for p in shm.rglob("*"))
    assert left == ["bobs_dir", "bobs_dir/alices_file_in_bobs_dir", "bobs_file", "bobs_link",
                    "nccl", "nccl/bobs_seg"]
    assert (victim / "precious").exists()


def test_shm_is_left_alone_while_the_user_has_another_job_here(tmp_path: Path) -> None:
    shm, _ = shm_tree(tmp_path)
    slurm = fake_slurm()
    other = slurm.submit(SubmitRequest(user="alice"))
    slurm.start(other, "gpu[03-04]", at=0)

    out = epilog(snapshot(), FakeProcessTable(), tmp_path, slurm=slurm)

    assert out.shm is not None and not out.shm.ran and f"job(s) {other}" in out.shm.why
    assert (shm / "torch_shm_1").exists()


def test_shm_is_cleaned_when_the_users_other_job_runs_elsewhere(tmp_path: Path) -> None:
    shm, _ = shm_tree(tmp_path)
    slurm = fake_slurm()
    for user, node in (("alice", "gpu01"), ("bob", "gpu03")):
        slurm.start(slurm.submit(SubmitRequest(user=user)), node, at=0)

    out = epilog(snapshot(), FakeProcessTable(), tmp_path, slurm=slurm)

    assert out.shm is not None and out.shm.ran
    assert not (shm / "torch_shm_1").exists()


def test_shm_refuses_root_and_a_symlinked_shm_dir(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert not clean_shm(real, 0).ran
    assert not clean_shm(tmp_path / "link", UID).ran
    assert not clean_shm(tmp_path / "missing", UID).ran


# ---------------------------------------------------------------- stats and post-job checks


def test_stats_per_gpu_take_the_peak_from_samples_and_the_snapshot(tmp_path: Path) -> None:
    store = FakeStore()
    for minute, (util, mem) in enumerate(((80.0, 30000), (90.0, 52000))):
        store.record_util_sample(UtilSample(
            idempotency_key=f"s{minute}", job_id=JOB, node="gpu03", gpu_index=0,
            sampled_at=later(-10 + minute), util_pct=util, mem_used_mb=mem))
    snap = with_processes(snapshot(), g1=[(100, 12000)])
    procs = FakeProcessTable([FakeProc(100, cg(JOB))])

    out = epilog(snap, procs, tmp_path, store=store,
                 environ=env(job=JOB, gpus="0,1", SLURM_JOB_UID=str(UID)))

    rows = {r.gpu_index: r for r in store.rows(JobGpuStats)}
    assert out.stats_recorded == 2 and set(rows) == {0, 1}
    assert (rows[0].peak_mem_mb, rows[0].mean_util_pct) == (52000, 85.0)
    assert (rows[1].peak_mem_mb, rows[1].mean_util_pct) == (12000, 0.0)
    assert {(r.user, r.job_name, r.account, r.gpu_type, r.ended_at) for r in rows.values()} == {
        ("alice", "train", "llm", "a100_40g", NOW)}


def test_stats_fall_back_to_slurm_for_the_jobs_name_and_account(tmp_path: Path) -> None:
    slurm, store = fake_slurm(), FakeStore()
    jid = slurm.submit(SubmitRequest(user="carol", account="eval", name="sweep"))
    slurm.start(jid, "gpu03", at=1_700_000_000)
    environ = {"SLURMD_NODENAME": "gpu03", "SLURM_JOB_ID": str(jid), "SLURM_JOB_GPUS": "0",
               "SLURM_JOB_UID": str(UID)}

    epilog(snapshot(), FakeProcessTable(), tmp_path, slurm=slurm, store=store,
           environ=environ)

    [row] = store.rows(JobGpuStats)
    assert (row.user, row.job_name, row.account) == ("carol", "sweep", "eval")
    assert row.started_at is not None and row.started_at.timestamp() == 1_700_000_000


def test_a_pending_remap_drains_at_the_epilog(tmp_path: Path) -> None:
    slurm = fake_slurm()
    snap = snapshot(g1={"remapped_rows": RemappedRows(0, 1, True, False)})

    out = epilog(snap, FakeProcessTable(), tmp_path, slurm=slurm)

    assert (out.exit_code, out.action) == (0, "drained")
    assert slurm.nodes["gpu03"].reason.startswith("slurm-ml: remap.pending gpu1")


def test_an_ecc_delta_during_the_job_drains_at_the_epilog(tmp_path: Path) -> None:
    base = tmp_path / "baseline"
    save_baseline(base, JOB, snapshot())
    slurm, store = fake_slurm(), FakeStore()
    after = snapshot(g2={"ecc": EccCounts(0, 0, 0, 2)})

    out = epilog(after, FakeProcessTable(), tmp_path, slurm=slurm, store=store,
                 baseline_dir=base)

    assert (out.exit_code, out.action) == (0, "drained")
    assert slurm.nodes["gpu03"].reason.startswith("slurm-ml: ecc.aggregate_uncorrected gpu2")
    [event] = store.rows(HealthEvent)
    assert event.severity == "drain_after_job"
    assert not (base / f"baseline-{JOB}.json").exists()  # used once


def test_without_a_baseline_there_is_no_delta(tmp_path: Path) -> None:
    out = epilog(snapshot(g2={"ecc": EccCounts(0, 0, 0, 2)}), FakeProcessTable(), tmp_path,
                 baseline_dir=tmp_path / "none")
    assert out.action == "clean"


def test_baseline_round_trip_keeps_counters_and_not_supported(tmp_path: Path) -> None:
    snap = nvlink_down(gpu=1)
    snap = replace(snap, gpus=(replace(snap.gpus[0], nvlinks=NOT_SUPPORTED,
                                       ecc=EccCounts(1, 0, 5, NOT_SUPPORTED)), *snap.gpus[1:]))
    save_baseline(tmp_path, 7, snap)

    back = load_baseline(tmp_path, 7, "gpu03", remove=False)

    assert back is not None
    assert [(g.index, g.uuid, g.pci_bus_id, g.ecc) for g in back.gpus] == [
        (g.index, g.uuid, g.pci_bus_id, g.ecc) for g in snap.gpus]
    assert back.gpus[0].nvlinks is NOT_SUPPORTED
    link1 = back.gpus[1].nvlinks
    assert isinstance(link1, tuple) and [(k.link, k.replay_errors, k.crc_errors)
                                          for k in link1] == [(k, 0, 0) for k in range(12)]
    assert load_baseline(tmp_path, 7, "gpu04") is None  # another node's file is not used
    assert not (tmp_path / "baseline-7.json").exists()


def test_an_unhealthy_gpu_after_the_job_drains_once(tmp_path: Path) -> None:
    slurm = fake_slurm()
    out = epilog(nvlink_down(gpu=0), FakeProcessTable(), tmp_path, slurm=slurm)
    again = epilog(nvlink_down(gpu=0), FakeProcessTable(), tmp_path, slurm=slurm)
    assert (out.action, again.action) == ("drained", "already_drained")


# ---------------------------------------------------------------- failures


def test_database_down_the_epilog_still_kills_and_drains(tmp_path: Path) -> None:
    store, slurm = FakeStore(), fake_slurm()
    store.set_available(False)
    procs = FakeProcessTable([FakeProc(100, cg(JOB), unkillable=True)])

    out = epilog(with_processes(snapshot(), g0=[(100, 1)]), procs, tmp_path, slurm=slurm,
                 store=store)

    assert (out.exit_code, out.action) == (0, "drained")
    assert out.stats_recorded == 0 and out.store_errors
    assert slurm.nodes["gpu03"].drained


def test_a_hung_probe_does_not_hang_the_epilog(tmp_path: Path) -> None:
    shm, _ = shm_tree(tmp_path)
    q = replace(CFG.policy.quarantine, prolog_budget_s=0.1)
    cfg = replace(CFG, policy=replace(CFG.policy, quarantine=q))
    hung = HangingProbe()
    try:
        out = run_epilog(env(job=JOB, SLURM_JOB_UID=str(UID)), cfg=cfg, probe=hung,
                         slurm=fake_slurm(), store=FakeStore(), procs=FakeProcessTable(),
                         now=NOW, sleep=Sleeps(), shm_dir=shm)
    finally:
        hung.release.set()

    assert (out.exit_code, out.action) == (0, "recorded")
    assert out.findings[0].check_id == "probe.timeout"
    assert out.shm is not None and out.shm.ran


def test_no_job_id_means_nothing_to_do(tmp_path: Path) -> None:
    out = epilog(snapshot(), FakeProcessTable(), tmp_path, environ={"SLURMD_NODENAME": "gpu03"})
    assert (out.exit_code, out.action) == (0, "skipped")
