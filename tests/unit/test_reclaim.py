"""Reclamation rules: zombies (warn, grace, act, woke up, stale, exempt, memory), jobs stuck
completing, orphan GPU processes."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from builders import running_job, slurm_node
from hypothesis import given
from hypothesis import strategies as st

from slurm_ml.config import ReclaimConfig
from slurm_ml.model import ALLOC_QOS
from slurm_ml.policy.cluster_jobs import RunningJob
from slurm_ml.policy.reclaim import (
    REASON_LIMIT,
    CompletingJob,
    GpuSample,
    OrphanReport,
    drain_reason,
    orphan_drains,
    stuck_completing,
    zombie_verdicts,
)

NOW = 1_800_000_000
MIN = 60
CFG = ReclaimConfig()  # heartbeat 600 s, idle <= 1 %, held >= 1024 MB, grace 900 s
SAFE = re.compile(r"[A-Za-z0-9 ._:/()+,#%<>=-]*")


def job(job_id: int = 42, *, gpus: int = 1, started: int = 2 * 3600, requeue: bool = True,
        batch: bool = True, qos: str = ALLOC_QOS, account: str = "nlp") -> RunningJob:
    return running_job(job_id, start=NOW - started, name="train", account=account, user="ana",
                       qos=qos, gpus=gpus, nodes=("gpu01",), requeue=requeue, batch=batch)


def series(*, frm: int, to: int = 0, util: float = 0.0, mem: int = 20_000, gpu: int = 0,
           node: str = "gpu01", step: int = 60, job_id: int = 42) -> list[GpuSample]:
    """Samples every ``step`` seconds from ``frm`` to ``to`` seconds ago, inclusive."""
    return [GpuSample(job_id=job_id, node=node, gpu=gpu, at=NOW - ago, util_pct=util,
                      mem_mb=mem) for ago in range(frm, to - 1, -step)]


IDLE = series(frm=20 * MIN)  # idle, memory held, 20 minutes
BUSY_THEN_IDLE = series(frm=30 * MIN, to=16 * MIN, util=80.0) + series(frm=15 * MIN)

ZOMBIES = [
    # name, job, samples, warned (seconds ago or None), expected action
    ("idle-for-a-heartbeat-is-warned", job(), IDLE, None, "warn"),
    ("idle-exactly-a-heartbeat", job(), series(frm=40 * MIN, to=11 * MIN, util=50.0)
     + series(frm=10 * MIN), None, "warn"),
    ("idle-less-than-a-heartbeat", job(), series(frm=30 * MIN, to=10 * MIN, util=50.0)
     + series(frm=9 * MIN), None, None),
    ("busy", job(), series(frm=20 * MIN, util=60.0), None, None),
    ("util-at-the-threshold-is-idle", job(), series(frm=20 * MIN, util=1.0), None, "warn"),
    ("util-above-the-threshold-is-busy", job(), series(frm=20 * MIN, util=1.5), None, None),
    ("memory-not-held", job(), series(frm=20 * MIN, mem=500), None, None),
    ("memory-exactly-the-minimum", job(), series(frm=20 * MIN, mem=1024), None, "warn"),
    ("memory-released-by-now", job(), series(frm=20 * MIN, to=2 * MIN)
     + series(frm=MIN, mem=0), None, None),
    ("one-of-two-gpus-busy", job(gpus=2), IDLE + series(frm=20 * MIN, util=90.0, gpu=1), None,
     None),
    ("both-gpus-idle-one-holds-memory", job(gpus=2), IDLE + series(frm=20 * MIN, mem=0, gpu=1),
     None, "warn"),
    ("a-gpu-of-the-job-unsampled", job(gpus=2), IDLE, None, None),
    ("second-gpu-sampled-for-less-than-a-heartbeat", job(gpus=2),
     IDLE + series(frm=5 * MIN, gpu=1), None, None),
    ("newest-sample-just-fresh", job(), series(frm=20 * MIN, to=5 * MIN), None, "warn"),
    ("newest-sample-stale", job(), series(frm=20 * MIN + 1, to=5 * MIN + 1), None, None),
    ("one-gpu-stale", job(gpus=2), IDLE + series(frm=20 * MIN, to=6 * MIN, gpu=1), None, None),
    ("no-samples", job(), [], None, None),
    ("job-younger-than-a-heartbeat", job(started=9 * MIN), series(frm=9 * MIN), None, None),
    ("samples-of-an-earlier-run-do-not-count", job(started=5 * MIN), IDLE, None, None),
    ("samples-of-another-job-do-not-count", job(), series(frm=20 * MIN, job_id=7), None, None),
    # after a warning
    ("within-the-grace-period", job(), IDLE, 14 * MIN, None),
    ("grace-over-requeued-when-resumable", job(), series(frm=40 * MIN), 15 * MIN, "requeue"),
    ("grace-over-cancelled-when-not-resumable", job(requeue=False), series(frm=40 * MIN),
     20 * MIN, "cancel"),
    ("woke-up-after-the-warning-and-busy", job(), series(frm=40 * MIN, to=5 * MIN)
     + series(frm=4 * MIN, util=30.0), 20 * MIN, None),
    ("woke-up-after-the-warning-then-idle-again-is-warned-again", job(), BUSY_THEN_IDLE,
     20 * MIN, "warn"),
    ("warning-of-an-earlier-run-does-not-count", job(started=30 * MIN), series(frm=25 * MIN),
     40 * MIN, "warn"),
    # exemptions
    ("interactive-exempt", job(batch=False), IDLE, None, None),
    ("exempt-qos", job(qos="debug"), IDLE, None, None),
    ("exempt-account", job(account="ops"), IDLE, None, None),
    ("no-gpus", job(gpus=0), IDLE, None, None),
]
EXEMPT = replace(CFG, exempt_qos=("debug",), exempt_accounts=("ops",))


@pytest.mark.parametrize(("running", "samples", "warned", "action"), [c[1:] for c in ZOMBIES],
                         ids=[c[0] for c in ZOMBIES])
def test_zombie_rules(running: RunningJob, samples: list[GpuSample], warned: int | None,
                      action: str | None) -> None:
    warned_at = {} if warned is None else {running.job_id: NOW - warned}

    out = zombie_verdicts(NOW, [running], {running.job_id: samples}, warned_at, EXEMPT)

    assert [v.action for v in out] == ([] if action is None else [action])
    assert all(v.job_id == running.job_id for v in out)


@pytest.mark.parametrize(("exempt_interactive", "action"), [(True, None), (False, "cancel")],
                         ids=["exempt-by-default", "when-not-exempt-cancelled-not-requeued"])
def test_interactive_sessions_cannot_be_requeued(exempt_interactive: bool,
                                                 action: str | None) -> None:
    cfg = replace(CFG, exempt_interactive=exempt_interactive)
    session = job(batch=False)

    out = zombie_verdicts(NOW, [session], {42: series(frm=40 * MIN)}, {42: NOW - 20 * MIN}, cfg)

    assert [v.action for v in out] == ([] if action is None else [action])


MESSAGES = [
    ("warn", job(), None, ["job 42 (train)", "20000 MB", "1%", "20 min", "limit 10 min",
                           "within 15 min", "requeued", "scancel 42", "contact"]),
    ("requeue", job(), 15 * MIN, ["requeued", "15 min after a warning", "checkpoint",
                                  "contact"]),
    ("cancel", job(requeue=False), 15 * MIN, ["cancelled", "--requeue", "checkpoints",
                                               "contact"]),
]


@pytest.mark.parametrize(("running", "warned", "fragments"), [c[1:] for c in MESSAGES],
                         ids=[c[0] for c in MESSAGES])
def test_zombie_messages_say_what_why_and_what_to_do(running: RunningJob, warned: int | None,
                                                     fragments: list[str]) -> None:
    warned_at = {} if warned is None else {42: NOW - warned}

    [verdict] = zombie_verdicts(NOW, [running], {42: IDLE}, warned_at, CFG)

    for fragment in fragments:
        assert fragment in verdict.reason
    assert verdict.details["mem_mb"] == 20_000
    assert verdict.details["idle_s"] == 20 * MIN


def test_zombies_are_judged_one_by_one() -> None:
    jobs = [job(1), job(2), job(3, batch=False)]
    samples = {1: series(frm=20 * MIN, job_id=1), 2: series(frm=20 * MIN, util=70, job_id=2),
               3: series(frm=20 * MIN, job_id=3)}

    out = zombie_verdicts(NOW, jobs, samples, {}, CFG)

    assert [(v.job_id, v.action) for v in out] == [(1, "warn")]


# --------------------------------------------------------------------------- drains


NODES = {"gpu01": slurm_node("gpu01", state="MIXED"), "gpu02": slurm_node("gpu02", state="MIXED"),
         "gpu03": slurm_node("gpu03", state="MIXED", drained=True, reason="admin: DIMM"),
         "gpu04": slurm_node("gpu04", state="DRAINED")}

STUCK = [
    ("past-the-timeout-drains-each-node",
     [CompletingJob(42, ("gpu01", "gpu02"), NOW - 31 * MIN)],
     [("gpu01", 42, "slurm-ml: stuck completing job 42 (31 min)"),
      ("gpu02", 42, "slurm-ml: stuck completing job 42 (31 min)")]),
    ("at-the-timeout-is-not-stuck", [CompletingJob(42, ("gpu01",), NOW - 30 * MIN)], []),
    ("end-unknown-no-verdict", [CompletingJob(42, ("gpu01",), None)], []),
    ("already-drained-nodes-are-left-alone",
     [CompletingJob(42, ("gpu01", "gpu03", "gpu04"), NOW - 2 * 3600)],
     [("gpu01", 42, "slurm-ml: stuck completing job 42 (120 min)")]),
    ("unknown-node-is-left-alone", [CompletingJob(42, ("gpu99",), NOW - 2 * 3600)], []),
    ("one-order-per-node-for-the-longest-stuck",
     [CompletingJob(41, ("gpu01",), NOW - 40 * MIN), CompletingJob(42, ("gpu01",),
                                                                    NOW - 90 * MIN)],
     [("gpu01", 42, "slurm-ml: stuck completing job 42 (90 min)")]),
]


@pytest.mark.parametrize(("jobs", "orders"), [c[1:] for c in STUCK], ids=[c[0] for c in STUCK])
def test_stuck_completing(jobs: list[CompletingJob], orders: list[tuple[str, int, str]]) -> None:
    out = stuck_completing(NOW, jobs, NODES, CFG)

    assert [(d.node, d.job_id, d.reason) for d in out] == orders
    assert all(d.kind == "stuck_completing" for d in out)


ORPHANS = [
    ("recent-report-drains", [OrphanReport("gpu01", NOW - 5 * MIN, 3, (4242,))],
     [("gpu01", "slurm-ml: process.orphan gpu3 (pid 4242)")]),
    ("several-pids", [OrphanReport("gpu01", NOW - 5 * MIN, 0, (11, 12, 13))],
     [("gpu01", "slurm-ml: process.orphan gpu0 (pid 11 +2 more)")]),
    ("gpu-unknown", [OrphanReport("gpu01", NOW - 5 * MIN, None, (7,))],
     [("gpu01", "slurm-ml: process.orphan (pid 7)")]),
    ("no-pids", [OrphanReport("gpu01", NOW - 5 * MIN, 1, ())],
     [("gpu01", "slurm-ml: process.orphan gpu1")]),
    ("at-the-lookback-counts", [OrphanReport("gpu01", NOW - 3600, 1, (7,))],
     [("gpu01", "slurm-ml: process.orphan gpu1 (pid 7)")]),
    ("older-than-the-lookback", [OrphanReport("gpu01", NOW - 3601, 1, (7,))], []),
    ("admin-drained-node-left-alone", [OrphanReport("gpu03", NOW - 60, 1, (7,))], []),
    ("drained-node-left-alone", [OrphanReport("gpu04", NOW - 60, 1, (7,))], []),
    ("unknown-node-left-alone", [OrphanReport("gpu99", NOW - 60, 1, (7,))], []),
    ("one-order-per-node-from-the-newest",
     [OrphanReport("gpu01", NOW - 50 * MIN, 1, (7,)),
      OrphanReport("gpu01", NOW - 2 * MIN, 5, (9,)),
      OrphanReport("gpu02", NOW - 10 * MIN, 2, (8,))],
     [("gpu01", "slurm-ml: process.orphan gpu5 (pid 9)"),
      ("gpu02", "slurm-ml: process.orphan gpu2 (pid 8)")]),
]


@pytest.mark.parametrize(("reports", "orders"), [c[1:] for c in ORPHANS],
                         ids=[c[0] for c in ORPHANS])
def test_orphan_drains(reports: list[OrphanReport], orders: list[tuple[str, str]]) -> None:
    out = orphan_drains(NOW, reports, NODES, CFG)

    assert [(d.node, d.reason) for d in out] == orders
    assert all(d.kind == "orphan_process" and d.job_id is None for d in out)


@pytest.mark.parametrize(("text", "reason"), [
    ("stuck completing job 1 (31 min)", "slurm-ml: stuck completing job 1 (31 min)"),
    ("quote' semi; pipe| new\nline", "slurm-ml: quote semi pipe new line"),
    ("x" * 200, "slurm-ml: " + "x" * (REASON_LIMIT - len("slurm-ml: "))),
], ids=["plain", "unsafe-characters", "too-long"])
def test_drain_reasons_are_owned_safe_and_short(text: str, reason: str) -> None:
    assert drain_reason(text) == reason


@given(st.text(max_size=300))
def test_every_drain_reason_is_owned_safe_and_short(text: str) -> None:
    reason = drain_reason(text)

    assert reason.startswith("slurm-ml:")
    assert len(reason) <= REASON_LIMIT
    assert SAFE.fullmatch(reason)
