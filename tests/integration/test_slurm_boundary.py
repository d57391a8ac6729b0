"""The Slurm boundary against the real dev cluster (slurmctld, slurmd, slurmdbd, MariaDB)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest
from slurm_jobs import sbatch, unreachable_slurm_conf, wait_state

from slurm_ml.model import GpuRequest, JobState
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.errors import SlurmCommandError, SlurmTimeout
from slurm_ml.slurm.protocol import SubmitRequest
from slurm_ml.slurm.runner import SlurmRunner

pytestmark = pytest.mark.integration
DONE = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT}


@dataclass(frozen=True)
class CountingRunner(SlurmRunner):
    log: list[tuple[str, ...]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str], *, timeout_s: float | None = None,
                 input_text: str | None = None) -> str:
        self.log.append(tuple(argv))
        return SlurmRunner.__call__(self, argv, timeout_s=timeout_s, input_text=input_text)


@pytest.fixture
def runner(slurm_conf: str) -> CountingRunner:
    return CountingRunner(env={"SLURM_CONF": slurm_conf}, timeout_s=30)


@pytest.fixture
def slurm(runner: CountingRunner) -> Iterator[CliSlurm]:
    client = CliSlurm(runner)
    before = {j.job_id for j in client.list_jobs()}
    yield client
    mine = [j.job_id for j in client.list_jobs() if j.job_id not in before and j.state not in DONE]
    if mine:
        client.cancel(mine)


@pytest.fixture
def workdir(slurm_conf: str) -> str:
    import os
    return os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")


def wait_until(what: str, cond: Callable[[], bool], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(1)


def test_submit_as_researchers_and_read_back(slurm: CliSlurm, workdir: str) -> None:
    a = slurm.submit(SubmitRequest(user="alice", account="detection", gres="gpu:a100_40g:2",
                                   hold=True, name="it-read-a", workdir=workdir))
    b = slurm.submit(SubmitRequest(user="carol", gpus="3", hold=True, name="it-read-b",
                                   time_limit="30", time_min="10", requeue=False,
                                   workdir=workdir))
    jobs = {j.job_id: j for j in slurm.list_jobs(job_ids=[a, b])}
    assert set(jobs) == {a, b}
    ja, jb = jobs[a], jobs[b]
    assert (ja.user, ja.account, ja.qos, ja.state) == ("alice", "detection", "alloc",
                                                        JobState.PENDING)
    assert ja.gpus == (GpuRequest(2, "node", "a100_40g"),)
    assert jb.account == "llm-eval"  # carol's default account
    assert jb.gpus == (GpuRequest(3, "job", None),)
    # admission moves --time-min into its record (Slurm's TimeMin would let backfill
    # shorten the job's limit) and clears it in Slurm
    assert (jb.time_limit_min, jb.time_min_min, jb.requeue) == (30, None, False)
    assert '"min_runtime":10' in jb.admin_comment
    assert slurm.list_jobs(job_ids=[a], users=["bob"]) == []


def test_wrong_account_is_rejected_by_slurm(slurm: CliSlurm, workdir: str) -> None:
    with pytest.raises(SlurmCommandError, match="account"):
        slurm.submit(SubmitRequest(user="carol", account="detection", hold=True,
                                   workdir=workdir))


@pytest.fixture
def drained_gpu06(slurm: CliSlurm) -> Iterator[str]:
    slurm.drain_node("gpu06", "slurm-ml: test hold-back")
    yield "gpu06"
    slurm.resume_node("gpu06")


@pytest.mark.timeout(600)  # the 100 sbatch calls alone may take up to 300 s
def test_site_factor_on_100_pending_jobs_in_3_calls(
    slurm: CliSlurm, runner: CountingRunner, workdir: str, drained_gpu06: str,
    slurm_conf: str,
) -> None:
    # Pending, eligible jobs (they wait for the drained node), so sprio lists them.
    script = "\n".join(
        f"runuser -u bob -- sbatch --parsable --nodelist={drained_gpu06} --gres=gpu:1 "
        f"--chdir={workdir} -o /dev/null --job-name=it-sf --wrap 'sleep 1'"
        for _ in range(100)
    )
    out = SlurmRunner(env={"SLURM_CONF": slurm_conf}, timeout_s=300)(["bash", "-c", script])
    ids = [int(x) for x in out.split()]
    assert len(ids) == 100
    wanted = {jid: 2000 + 100 * (i % 3) for i, jid in enumerate(ids)}
    runner.log.clear()
    calls = slurm.set_site_factor(wanted)
    scontrols = [c for c in runner.log if c[0] == "scontrol"]
    assert calls == len(scontrols) and 1 <= calls <= 3
    seen = slurm.site_factors()
    assert {jid: seen.get(jid) for jid in ids} == wanted
    # list_jobs fills the factor in on 22.05, whose squeue --json lacks it
    assert {j.job_id: j.site_factor for j in slurm.list_jobs(job_ids=ids)} == wanted


def test_site_factor_tolerates_jobs_that_ended(slurm: CliSlurm, workdir: str,
                                               drained_gpu06: str) -> None:
    a = slurm.submit(SubmitRequest(user="bob", gres="gpu:1", workdir=workdir,
                                   name="it-gone"))
    slurm.set_site_factor({a: 5, 999999: 5})  # 999999 never existed: skipped, not fatal


def test_site_factor_update_blanks_a_pending_reason_until_the_scheduler_returns(
    slurm: CliSlurm, jobs: list[int], record_property: Callable[[str, object], None],
) -> None:
    """The fact ``daemon/reasons.py`` rests on: updating a pending job's SiteFactor shows
    its Reason as ``None`` at once (22.05 and 24.11.5), and the scheduler states the real
    reason again by itself. A scheduler pass may land between the update and the read,
    so three updates get three reads."""
    on_gpu06 = ("--nodelist=gpu06", "--time=10")
    blocker = sbatch("bob", *on_gpu06, "--gres=gpu:v100:4", "--job-name=it-sf-blocker",
                     "--wrap", "sleep 300", jobs=jobs)
    wait_state(blocker, {"RUNNING"})  # gpu06's four GPUs held before the waiter comes
    waiting = sbatch("bob", *on_gpu06, "--gres=gpu:v100:1", "--job-name=it-sf-waiting",
                     "--wrap", "sleep 1", jobs=jobs)

    def reason() -> str:
        return slurm.list_jobs(job_ids=[waiting])[0].reason

    seen = []
    for factor in (7, 8, 9):
        wait_until("the waiting job to wait for Resources", lambda: reason() == "Resources")
        slurm.set_site_factor({waiting: factor})
        seen.append(reason())
        if seen[-1] == "None":
            break
    record_property("reasons_right_after_site_factor", seen)
    assert seen[-1] == "None", f"Slurm kept the reason through 3 updates: {seen}"
    wait_until("the scheduler to state Resources again", lambda: reason() == "Resources",
               timeout_s=60)
    assert slurm.site_factors().get(waiting) == factor


def test_drain_and_resume_with_reason(slurm: CliSlurm) -> None:
    slurm.drain_node("gpu05", "slurm-ml: nvlink gpu2 inactive")
    try:
        n = {x.name: x for x in slurm.list_nodes()}["gpu05"]
        assert n.drained and n.reason == "slurm-ml: nvlink gpu2 inactive"
    finally:
        slurm.resume_node("gpu05")
    n = {x.name: x for x in slurm.list_nodes()}["gpu05"]
    assert not n.drained and n.reason == ""
    with pytest.raises(SlurmCommandError, match="Invalid node name"):
        slurm.drain_node("nosuchnode", "x")


def cancelled(slurm: CliSlurm, jid: int) -> bool:
    """slurmctld keeps an ended job for MinJobAge, and ``list_jobs`` must show it
    CANCELLED then: 22.05's ``squeue --json`` ignores state filters and lists it anyway;
    24.11's applies squeue's default filter unless asked, hence ``--states=all``."""
    return slurm.list_jobs(job_ids=[jid])[0].state is JobState.CANCELLED


def test_requeue_running_job_then_cancel(slurm: CliSlurm, workdir: str) -> None:
    jid = slurm.submit(SubmitRequest(user="dave", gres="gpu:v100:1", command="sleep 120",
                                     requeue=True, workdir=workdir, name="it-requeue"))
    wait_until("job to run", lambda: slurm.list_jobs(job_ids=[jid])[0].state
               is JobState.RUNNING)
    slurm.requeue([jid])
    state = slurm.list_jobs(job_ids=[jid])[0].state
    assert state in {JobState.PENDING, JobState.REQUEUED, JobState.COMPLETING}
    slurm.cancel([jid])
    wait_until("job to be cancelled", lambda: cancelled(slurm, jid))
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        slurm.requeue([999999])


def test_windowed_usage_matches_the_jobs_that_ran(slurm: CliSlurm, workdir: str) -> None:
    t0 = int(time.time()) - 1
    a = slurm.submit(SubmitRequest(user="alice", account="llm-pretrain",
                                   gres="gpu:a100_80g:2", command="sleep 4", workdir=workdir,
                                   name="it-usage-a"))
    b = slurm.submit(SubmitRequest(user="carol", gres="gpu:v100:1", command="sleep 4",
                                   qos="free", workdir=workdir, name="it-usage-b"))

    def recorded() -> bool:
        got = {u.job_id: u for u in slurm.job_usage(t0, int(time.time()) + 1)}
        # --truncate clips a running job's End to the window, so wait on the state.
        return a in got and b in got and {got[a].state, got[b].state} <= DONE

    wait_until("slurmdbd to record both jobs", recorded, timeout_s=120)
    t1 = int(time.time()) + 1
    usage = {u.job_id: u for u in slurm.job_usage(t0, t1)}
    ua, ub = usage[a], usage[b]
    assert (ua.user, ua.account, ua.qos, ua.state) == ("alice", "llm-pretrain", "alloc",
                                                        JobState.COMPLETED)
    assert ua.gpus == 2 and ua.alloc_tres["gres/gpu:a100_80g"] == 2
    assert 3 <= ua.elapsed_s <= 10
    assert ua.gpu_hours() == pytest.approx(2 * ua.elapsed_s / 3600)
    assert ub.qos == "free" and ub.alloc_tres["gres/gpu:v100"] == 1
    # A window that closed before the jobs started holds none of them.
    assert not {a, b} & {u.job_id for u in slurm.job_usage(t0 - 7200, t0 - 3600)}
    # A window cut in the middle of job a charges only the part inside it.
    assert ua.start is not None
    part = {u.job_id: u for u in slurm.job_usage(ua.start, ua.start + 2)}
    assert part[a].elapsed_s == 2


def test_runaway_jobs_list_does_not_prompt(slurm: CliSlurm) -> None:
    assert slurm.list_runaway_jobs() == []
    assert slurm.fix_runaway_jobs() == []


def test_unreachable_controller_is_a_named_timeout(tmp_path: object, slurm_conf: str) -> None:
    from pathlib import Path
    conf = unreachable_slurm_conf(slurm_conf, Path(str(tmp_path)))
    client = CliSlurm(SlurmRunner(env={"SLURM_CONF": str(conf)}, timeout_s=3))
    with pytest.raises((SlurmTimeout, SlurmCommandError)):
        client.list_nodes()
