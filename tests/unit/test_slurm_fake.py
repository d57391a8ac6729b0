"""FakeSlurm behaves like the real boundary for the operations callers rely on."""

from __future__ import annotations

import pytest

from slurm_ml.model import JobState, JobUsage, Node
from slurm_ml.slurm.batching import site_factor_batches
from slurm_ml.slurm.errors import SlurmCommandError
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.slurm.protocol import SlurmClient, SubmitRequest


def node(name: str) -> Node:
    return Node(name, "IDLE", frozenset(), "", ("a100",), "gpu:a100:8", 8, "a100", 64, 512000)


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
    s = FakeSlurm([node("gpu01")])
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
