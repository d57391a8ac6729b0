"""The epilog's efficiency summary in the job's AdminComment (hooks.job_summary)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hooks_helpers import CFG, NOW, env, fake_slurm, later, probe, snapshot

from slurm_ml.hooks.epilog import run_epilog
from slurm_ml.hooks.job_summary import ATTEMPTS, write_summary
from slurm_ml.hooks.procs_fake import FakeProcessTable
from slurm_ml.model import JobAccounting, JobState
from slurm_ml.policy.admission.decision import read_record
from slurm_ml.policy.jobstats.summary import read_summary
from slurm_ml.slurm.errors import SlurmCommandError
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store import FakeStore, UtilSample

JOB = 42
ADMITTED = 'slurm-ml {"at":1,"min_runtime":60,"qos":"alloc","v":1}'


def accounted(nodes: str = "gpu03", comment: str = ADMITTED, gpus: int = 4) -> JobAccounting:
    return JobAccounting(job_id=JOB, name="train", user="alice", account="llm",
                         partition="gpu", state=JobState.COMPLETED, elapsed_s=1200,
                         alloc_cpus=8, alloc_gpus=gpus, nodes=nodes,
                         start=int(later(-20).timestamp()), end=int(NOW.timestamp()),
                         admin_comment=comment, gpu_type="a100_40g")


def store_with_samples(node: str = "gpu03", gpus: range = range(4)) -> FakeStore:
    store = FakeStore()
    for minute in range(0, 20, 5):
        for g in gpus:
            store.record_util_sample(UtilSample(
                idempotency_key=f"{node}-{g}-{minute}", job_id=JOB, node=node, gpu_index=g,
                sampled_at=later(-20 + minute), util_pct=90.0 if g == 0 else 0.0,
                mem_used_mb=20_000))
    return store


def epilog(slurm: FakeSlurm, store: FakeStore, tmp_path: Path, sleeps: list[float]) -> object:
    (tmp_path / "shm").mkdir(exist_ok=True)
    return run_epilog(env(job=JOB, gpus="0,1,2,3"), cfg=CFG, probe=probe(snapshot()),
                      slurm=slurm, store=store, procs=FakeProcessTable(), now=NOW,
                      sleep=sleeps.append, shm_dir=tmp_path / "shm")


def test_the_epilog_writes_the_summary_beside_admissions_record(tmp_path: Path) -> None:
    slurm = fake_slurm()
    slurm.accounting[JOB] = accounted()
    out = epilog(slurm, store_with_samples(), tmp_path, [])
    assert str(out.summary) == "written"  # type: ignore[attr-defined]
    stored = slurm.accounting[JOB].admin_comment
    assert '"' not in stored  # as sacctmgr stores it
    assert read_record(stored)["min_runtime"] == 60  # type: ignore[index]
    summary = read_summary(stored)
    assert summary is not None and len(summary.uses) == 4
    assert [u.idle_frac for u in summary.uses] == [0.0, 1.0, 1.0, 1.0]
    assert summary.uses[0].total_mem_mb is not None  # the probe's reading
    assert ("sacctmgr", "modify", "job") in slurm.calls


def test_no_record_in_slurmdbd_or_nothing_measured_writes_nothing(tmp_path: Path) -> None:
    slurm = fake_slurm()
    out = epilog(slurm, store_with_samples(), tmp_path, [])
    assert str(out.summary).startswith("skipped: slurmdbd has no record")  # type: ignore[attr-defined]
    got = write_summary(JOB, "gpu03", cfg=CFG, slurm=_with(accounted()), snap=None,
                        samples=[], stats=[], job=None, now=NOW, sleep=lambda _s: None)
    assert got.outcome == "skipped" and "nothing measured" in got.why


def _with(a: JobAccounting) -> FakeSlurm:
    slurm = fake_slurm()
    slurm.accounting[a.job_id] = a
    return slurm


def test_someone_elses_admin_comment_is_left_alone() -> None:
    slurm = _with(accounted(comment="JS1:H4sIAAA="))
    got = write_summary(JOB, "gpu03", cfg=CFG, slurm=slurm, snap=snapshot(),
                        samples=store_with_samples().util_samples_for(JOB), stats=[], job=None,
                        now=NOW, sleep=lambda _s: None)
    assert got.outcome == "skipped" and slurm.accounting[JOB].admin_comment == "JS1:H4sIAAA="


def test_a_refused_write_is_a_failed_summary_not_a_failed_epilog() -> None:
    class Refuses(FakeSlurm):
        def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
            raise SlurmCommandError(("sacctmgr",), 1, "Nothing modified")

    slurm = Refuses()
    slurm.accounting[JOB] = accounted()
    got = write_summary(JOB, "gpu03", cfg=CFG, slurm=slurm, snap=None,
                        samples=store_with_samples().util_samples_for(JOB), stats=[], job=None,
                        now=NOW, sleep=lambda _s: None)
    assert got.outcome == "failed" and "Nothing modified" in got.why


class Racing(FakeSlurm):
    """Another node's epilog overwrites the record right after each of ours, ``times``
    times: the record goes back to what it was before our write."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        before = self.accounting[job_id]
        super().set_accounted_admin_comment(job_id, text)
        if self.times > 0:
            self.times -= 1
            self.accounting[job_id] = before


def test_a_multi_node_job_rewrites_until_its_rows_read_back() -> None:
    slurm = Racing(times=1)
    slurm.accounting[JOB] = accounted(nodes="gpu[03-04]", gpus=8)
    sleeps: list[float] = []
    got = write_summary(JOB, "gpu03", cfg=CFG, slurm=slurm, snap=snapshot(),
                        samples=store_with_samples().util_samples_for(JOB), stats=[], job=None,
                        now=NOW, sleep=sleeps.append)
    assert got.outcome == "written" and "after 2 write(s)" in got.why
    assert len(sleeps) == 2 and all(1.0 <= s < 2.0 for s in sleeps)
    summary = read_summary(slurm.accounting[JOB].admin_comment)
    assert summary is not None and {u.node for u in summary.uses} == {"gpu03"}


def test_a_race_lost_every_time_says_so() -> None:
    slurm = Racing(times=ATTEMPTS)
    slurm.accounting[JOB] = accounted(nodes="gpu[03-04]", gpus=8)
    got = write_summary(JOB, "gpu03", cfg=CFG, slurm=slurm, snap=None,
                        samples=store_with_samples().util_samples_for(JOB), stats=[], job=None,
                        now=NOW, sleep=lambda _s: None)
    assert got.outcome == "written" and "not read back" in got.why


def test_a_single_node_job_is_not_read_back() -> None:
    slurm = _with(replace(accounted(), nodes="gpu03"))
    sleeps: list[float] = []
    write_summary(JOB, "gpu03", cfg=CFG, slurm=slurm, snap=None,
                  samples=store_with_samples().util_samples_for(JOB), stats=[], job=None,
                  now=NOW, sleep=sleeps.append)
    assert sleeps == []
