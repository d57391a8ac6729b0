"""FakeSlurm behaves like the real boundary for the operations callers rely on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from builders import slurm_node

from slurm_ml.model import JobState, JobUsage
from slurm_ml.slurm.batching import site_factor_batches
from slurm_ml.slurm.errors import SlurmCommandError
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.slurm.protocol import SlurmClient, SubmitRequest


def test_fake_satisfies_protocol() -> None:
    client: SlurmClient = FakeSlurm()
    assert client.version().major == 22


def test_site_factor_batches_group_by_value() -> None:
    batches = site_factor_batches({1: 5, 2: 5, 3: 7, 4: 5}, batch_size=2)
    assert batches == [(5, [1, 2]), (5, [4]), (7, [3])]


def test_site_factor_on_100_jobs_takes_few_calls() -> None:
    s = FakeSlurm()
    ids = [s.submit(SubmitRequest(user="alice", gres="gpu:1")) for _ in range(100)]
    calls = s.set_site_factor({jid: 1000 + (jid % 7) for jid in ids})
    assert calls == 1
    assert s.site_factors()[ids[0]] == 1000 + ids[0] % 7


def test_requeue_and_cancel_semantics() -> None:
    s = FakeSlurm()
    a = s.submit(SubmitRequest(user="alice", requeue=True))
    b = s.submit(SubmitRequest(user="bob", requeue=False))
    s.start(a, "gpu01", at=100)
    s.start(b, "gpu02", at=100)
    s.requeue([a])
    assert s.jobs[a].state is JobState.PENDING
    with pytest.raises(SlurmCommandError, match="disabled"):
        s.requeue([b])
    s.cancel([b])
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        s.cancel([b])


def test_drain_resume_and_unknown_node() -> None:
    s = FakeSlurm([slurm_node("gpu01")])
    s.drain_node("gpu01", "slurm-ml: ecc gpu0")
    assert s.nodes["gpu01"].drained and s.nodes["gpu01"].reason == "slurm-ml: ecc gpu0"
    s.resume_node("gpu01")
    assert not s.nodes["gpu01"].drained
    with pytest.raises(SlurmCommandError, match="Invalid node name"):
        s.drain_node("nope", "x")


def test_usage_window_and_runaways() -> None:
    s = FakeSlurm()
    s.usage = [
        JobUsage(1, "alice", "p", "alloc", JobState.COMPLETED, 0, {"gres/gpu": 2}, 0, 7200),
        JobUsage(2, "bob", "p", "alloc", JobState.RUNNING, 0, {"gres/gpu": 1}, 3600, None),
    ]
    s.runaway = {2}
    got = s.job_usage(3600, 10800)
    assert [(u.job_id, u.elapsed_s) for u in got] == [(1, 3600)]
    assert s.fix_runaway_jobs() == [2]
    assert {u.job_id for u in s.job_usage(3600, 10800)} == {1, 2}


def test_requeue_of_a_pending_job_is_refused_like_slurm() -> None:
    s = FakeSlurm()
    a = s.submit(SubmitRequest(user="alice", requeue=True))
    b = s.submit(SubmitRequest(user="bob", requeue=False))
    with pytest.raises(SlurmCommandError, match=f"Job is pending execution for job {a}"):
        s.requeue([a])
    with pytest.raises(SlurmCommandError, match="disabled"):  # Slurm checks the flag first
        s.requeue([b])
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        s.requeue([999])


@pytest.mark.parametrize("arrange", [
    pytest.param(lambda s, j: s.start(j, "gpu[01-02]", at=100), id="running"),
    pytest.param(lambda s, j: (s.start(j, "gpu01", at=100), s.completing(j, end_time=200)),
                 id="completing"),
])
def test_requeue_puts_a_started_job_back_in_the_queue(
        arrange: Callable[[FakeSlurm, int], object]) -> None:
    s = FakeSlurm()
    jid = s.submit(SubmitRequest(user="alice", requeue=True))
    arrange(s, jid)
    s.requeue([jid])
    job = s.jobs[jid]
    assert (job.state, job.reason, job.nodes, job.start_time, job.end_time) == (
        JobState.PENDING, "BeginTime", "", None, None)
    assert s.calls[-1] == ("scontrol", "requeue", str(jid))


def test_state_helpers_set_what_the_daemon_reads() -> None:
    s = FakeSlurm()
    jid = s.submit(SubmitRequest(user="alice", qos="free", requeue=False))
    s.pend(jid, reason="Resources", submit_time=50)
    assert (s.jobs[jid].state, s.jobs[jid].reason, s.jobs[jid].submit_time) == (
        JobState.PENDING, "Resources", 50)
    s.start(jid, "gpu03", at=100)
    assert (s.jobs[jid].state, s.jobs[jid].nodes, s.jobs[jid].start_time) == (
        JobState.RUNNING, "gpu03", 100)
    s.completing(jid, end_time=160)
    assert (s.jobs[jid].state, s.jobs[jid].end_time, s.jobs[jid].nodes) == (
        JobState.COMPLETING, 160, "gpu03")
    job = s.set_job(jid, nice=200, batch=False, requeue=True, qos="alloc")
    assert (job.nice, job.batch, job.requeue, job.qos) == (200, False, True, "alloc")
    assert s.jobs[jid] is job
    assert [c[0] for c in s.calls] == ["sbatch"]  # arranging the world is not a client call


def test_add_job_keeps_ids_unique() -> None:
    s = FakeSlurm()
    template = s.jobs[s.submit(SubmitRequest(user="alice"))]
    assert s.add_job(replace(template, job_id=40, batch=False)) == 40
    assert s.submit(SubmitRequest(user="bob")) == 41
    assert not s.jobs[40].batch


def test_cancel_leaves_the_active_states() -> None:
    s = FakeSlurm()
    a = s.submit(SubmitRequest(user="alice"))
    b = s.submit(SubmitRequest(user="bob"))
    s.start(a, "gpu01", at=0)
    s.cancel([a, b])
    active = {JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING}
    assert s.list_jobs(states=active) == []
    assert {s.jobs[a].state, s.jobs[b].state} == {JobState.CANCELLED}


def test_fix_runaway_returns_the_ids_and_clears_them() -> None:
    s = FakeSlurm()
    s.runaway = {7, 3}
    assert s.list_runaway_jobs() == [3, 7]
    assert s.fix_runaway_jobs() == [3, 7]
    assert s.runaway == set() and s.list_runaway_jobs() == [] and s.fix_runaway_jobs() == []
    assert s.calls.count(("sacctmgr", "show", "runawayjobs")) == 4


def test_signal_job_records_signals_and_refuses_unknown_or_ended_jobs() -> None:
    from slurm_ml.slurm.protocol import JobSignal

    s = FakeSlurm()
    a = s.submit(SubmitRequest(user="alice", requeue=True))
    s.start(a, "gpu01", at=100)
    s.signal_job(a, "USR1", target="batch")
    s.signal_job(a, "USR2", target="steps")
    assert s.signals == [(a, "USR1", "batch"), (a, "USR2", "steps")]
    assert s.jobs[a].state is JobState.RUNNING  # a signal is not a cancel
    assert ("scancel", "--signal=USR1", "batch", str(a)) in s.calls
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        s.signal_job(999, "USR1")
    s.cancel([a])
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        s.signal_job(a, "USR1")
    assert len(s.signals) == 2

    assert s.job_signal(a) is None  # its batch script set no --signal
    s.job_signals[a] = JobSignal("USR1", "batch", 90)
    assert s.job_signal(a) == JobSignal("USR1", "batch", 90)
