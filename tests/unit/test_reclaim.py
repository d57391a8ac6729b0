"""Reclamation rules: zombies (warn, grace, act, woke up, stale, exempt, memory, samples
that must cover the heartbeat on every GPU), jobs stuck completing, orphan GPU processes."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest
from builders import running_job, slurm_node
from hypothesis import given, settings
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
    sample_coverage,
    stuck_completing,
    zombie_status,
    zombie_verdicts,
)

NOW = 1_800_000_000
MIN = 60
# heartbeat 600 s, samples every 60 s, idle <= 1 %, held >= 1024 MB, grace 900 s
CFG = ReclaimConfig(zombie_heartbeat_s=600, sample_interval_s=60)
#: What install sets: samples every 300 s (HealthCheckInterval), a 900 s heartbeat.
SHIPPED = ReclaimConfig()
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
    ("newest-sample-just-fresh", job(), series(frm=20 * MIN, to=2 * MIN), None, "warn"),
    ("newest-sample-stale", job(), series(frm=20 * MIN + 1, to=2 * MIN + 1), None, None),
    ("a-gap-of-twice-the-interval", job(), series(frm=20 * MIN, to=6 * MIN)
     + series(frm=4 * MIN), None, "warn"),
    ("a-gap-over-twice-the-interval", job(), series(frm=20 * MIN, to=6 * MIN)
     + series(frm=4 * MIN - 1), None, None),
    ("a-gap-before-the-heartbeat-does-not-matter", job(), series(frm=30 * MIN, to=20 * MIN)
     + series(frm=11 * MIN), None, "warn"),
    ("samples-on-a-node-not-the-jobs-do-not-count", job(gpus=2),
     IDLE + series(frm=20 * MIN, gpu=0, node="gpu09"), None, None),
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


# ------------------------------------------------------------- zombie sample coverage
# The shipped interval: samples every 300 s, a 900 s heartbeat, gaps of at most 600 s.


def test_two_idle_samples_19_minutes_apart_give_no_verdict() -> None:
    """Issue 16: nothing between the two readings, yet a warning and then a requeue."""
    gappy = series(frm=19 * MIN, step=19 * MIN)  # 19 min ago and now, nothing between
    assert [s.at for s in gappy] == [NOW - 19 * MIN, NOW]

    assert zombie_verdicts(NOW, [job()], {42: gappy}, {}, SHIPPED) == []
    assert zombie_verdicts(NOW, [job()], {42: gappy}, {42: NOW - 20 * MIN}, SHIPPED) == []
    status = zombie_status(NOW, job(), gappy, SHIPPED)
    assert status.state == "no_verdict"
    assert "largest gap 19 min > 2 x 300 s" in status.text
    assert "cover 0 s of the 15 min window" in status.text
    assert "HealthCheckInterval" in status.text  # what to look at


def test_a_window_covered_at_the_shipped_interval_gives_the_verdict() -> None:
    every_5_min = series(frm=20 * MIN, step=5 * MIN)  # 5 readings, the oldest before the window
    one_missed = [s for s in every_5_min if s.at != NOW - 10 * MIN]  # a 10 min gap = 2 x 300 s
    two_missed = [s for s in one_missed if s.at != NOW - 5 * MIN]  # 15 min: too long

    assert [v.action for v in zombie_verdicts(NOW, [job()], {42: every_5_min}, {},
                                              SHIPPED)] == ["warn"]
    assert [v.action for v in zombie_verdicts(NOW, [job()], {42: one_missed}, {},
                                              SHIPPED)] == ["warn"]
    assert [v.action for v in zombie_verdicts(NOW, [job()], {42: one_missed},
                                              {42: NOW - 15 * MIN}, SHIPPED)] == ["requeue"]
    assert zombie_verdicts(NOW, [job()], {42: two_missed}, {}, SHIPPED) == []
    [verdict] = zombie_verdicts(NOW, [job()], {42: one_missed}, {}, SHIPPED)
    assert verdict.details["largest_gap_s"] == 10 * MIN
    assert verdict.details["sample_interval_s"] == 300


def test_a_gpu_never_sampled_means_no_verdict_and_why_names_the_sampled_ones() -> None:
    """A 2-GPU job (two tasks of --gpus-per-task=1) whose second GPU has no sample."""
    two = job(gpus=2)
    only_gpu0 = series(frm=20 * MIN, step=5 * MIN)

    assert zombie_verdicts(NOW, [two], {42: only_gpu0}, {42: NOW - 20 * MIN}, SHIPPED) == []
    status = zombie_status(NOW, two, only_gpu0, SHIPPED)
    assert status.state == "no_verdict"
    assert "1 of its 2 GPUs has no sample of this run (sampled: gpu01 GPU 0)" in status.text
    assert status.coverage is not None and status.coverage.sampled == ("gpu01 GPU 0",)


def test_a_gpu_on_another_node_does_not_stand_in_for_the_jobs_own() -> None:
    """Samples the sampler put on a node the job does not run on are not its GPUs."""
    two = job(gpus=2)
    samples = series(frm=20 * MIN, step=5 * MIN) + series(frm=20 * MIN, step=5 * MIN,
                                                          node="gpu09")

    assert zombie_verdicts(NOW, [two], {42: samples}, {}, SHIPPED) == []
    assert "1 of its 2 GPUs has no sample" in zombie_status(NOW, two, samples, SHIPPED).text


def test_coverage_reports_the_worst_gpu_and_what_it_covers() -> None:
    two = job(gpus=2)
    gpu1 = [s for s in series(frm=20 * MIN, step=5 * MIN, gpu=1) if s.at != NOW - 5 * MIN]
    gpu1 = [s for s in gpu1 if s.at != NOW - 10 * MIN]  # 15 -> 0 min ago: one 15 min gap
    samples = series(frm=20 * MIN, step=5 * MIN) + gpu1

    cov = sample_coverage(NOW, two, samples, SHIPPED)

    assert not cov.complete
    assert (cov.covered_s, cov.largest_gap_s, cov.worst_gpu) == (0, 15 * MIN, "gpu01 GPU 1")
    assert cov.problems == ("gpu01 GPU 1's samples cover 0 s of the 15 min window, largest "
                            "gap 15 min > 2 x 300 s",)
    assert sample_coverage(NOW, two, series(frm=20 * MIN, step=5 * MIN)
                           + series(frm=20 * MIN, step=5 * MIN, gpu=1), SHIPPED).complete


def test_a_window_without_a_sample_at_its_start_is_not_covered() -> None:
    """The first reading 12 of 15 minutes back: the first 3 minutes are unknown."""
    late = series(frm=12 * MIN, step=4 * MIN)

    cov = sample_coverage(NOW, job(started=20 * MIN), late, SHIPPED)

    assert (cov.covered_s, cov.largest_gap_s) == (12 * MIN, 4 * MIN)
    assert cov.problems == ("gpu01 GPU 0's samples cover 12 min of the 15 min window, "
                            "largest gap 4 min <= 2 x 300 s",)


@pytest.mark.parametrize(("running", "samples", "state", "fragment"), [
    (job(started=5 * MIN), [], "too_young", "less than the 15 min heartbeat"),
    (job(qos="debug"), IDLE, "exempt", "QOS debug is exempt"),
    (job(), [], "no_verdict", "its GPU has no sample of this run"),
    (job(), series(frm=20 * MIN, step=5 * MIN, util=50.0), "busy", "busy"),
    (job(), series(frm=30 * MIN, to=10 * MIN, step=5 * MIN, util=50.0)
     + series(frm=5 * MIN, step=5 * MIN), "idle", "idle on every GPU for 5 min of the 15 min"),
    (job(), series(frm=20 * MIN, step=5 * MIN, mem=10), "memory_free", "holds 10 MB"),
    (job(), series(frm=20 * MIN, step=5 * MIN), "zombie", "idle 20 min"),
], ids=["too-young", "exempt", "unsampled", "busy", "idle-short", "memory-free", "zombie"])
def test_zombie_status_says_where_a_job_stands(running: RunningJob, samples: list[GpuSample],
                                               state: str, fragment: str) -> None:
    status = zombie_status(NOW, running, samples, replace(SHIPPED, exempt_qos=("debug",)))

    assert (status.state, fragment in status.text) == (state, True), status.text


def test_why_shows_the_missing_verdict_and_its_evidence() -> None:
    from slurm_ml.ops.report import why_json, why_text

    status = zombie_status(NOW, job(gpus=2), series(frm=19 * MIN, step=19 * MIN), SHIPPED)

    data = why_json(42, None, None, None, [], zombie=status)

    assert data["zombie"]["state"] == "no_verdict"
    assert data["zombie"]["coverage"]["largest_gap_s"] == 19 * MIN
    assert data["zombie"]["coverage"]["sampled"] == ["gpu01 GPU 0"]
    text = why_text(data)
    assert ("Zombie check: no zombie verdict: 1 of its 2 GPUs has no sample of this run "
            "(sampled: gpu01 GPU 0); gpu01 GPU 0's samples cover 0 s of the 15 min window, "
            "largest gap 19 min > 2 x 300 s.") in text
    assert "Zombie check" not in why_text(why_json(42, None, None, None, []))


def test_slurm_ml_why_reads_the_samples_and_says_why_there_is_no_verdict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`slurm-ml why` over the fakes: the samples a cycle reads, judged the same way."""
    import json
    from datetime import UTC, datetime

    from click.testing import CliRunner
    from daemon_helpers import NOW as AT
    from daemon_helpers import world

    from slurm_ml.cli import reconciler
    from slurm_ml.store.fake import FakeStore
    from slurm_ml.store.records import UtilSample, derive_key

    slurm = world()  # job 1: 4 GPUs on gpu05, running for 5 h
    samples: list[UtilSample] = []

    def sample(gpu: int) -> None:
        samples.extend(UtilSample(
            idempotency_key=derive_key("t", gpu, k), job_id=1, node="gpu05", gpu_index=gpu,
            sampled_at=datetime.fromtimestamp(AT - 300 * k, UTC), util_pct=0.0,
            mem_used_mb=20_000) for k in range(7))  # every 5 min for 30 min

    def store(cfg: object, dsn: str) -> FakeStore:
        fresh = FakeStore()  # why closes the store it opened
        for s in samples:
            fresh.record_util_sample(s)
        return fresh

    for gpu in range(3):
        sample(gpu)
    monkeypatch.setattr(reconciler, "_slurm", lambda cfg: slurm)
    monkeypatch.setattr(reconciler, "_store", store)
    monkeypatch.setattr(reconciler.time, "time", lambda: float(AT))
    args = ["1", "--dsn", "postgresql://fake/db"]

    text = CliRunner().invoke(reconciler.why_cmd, args)
    assert text.exit_code == 0, text.output
    assert ("Zombie check: no zombie verdict: 1 of its 4 GPUs has no sample of this run "
            "(sampled: gpu05 GPU 0, gpu05 GPU 1, gpu05 GPU 2).") in text.output

    sample(3)
    data = json.loads(CliRunner().invoke(reconciler.why_cmd, [*args, "--json"]).stdout)
    assert (data["zombie"]["state"], data["zombie"]["idle_s"]) == ("zombie", 30 * MIN)
    assert data["zombie"]["coverage"]["problems"] == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40 * MIN), max_size=12), min_size=1, max_size=3),
       st.integers(1, 3))
def test_a_verdict_always_rests_on_a_covered_window(times: list[list[int]], gpus: int) -> None:
    """Whatever the readings, a warning means every GPU of the job has a reading at or
    before the heartbeat's start and none more than 2 x 300 s apart since, up to now."""
    running = job(gpus=gpus, started=60 * MIN)
    samples = [GpuSample(42, "gpu01", g, NOW - ago, 0.0, 20_000)
               for g, agos in enumerate(times) for ago in agos]

    if not zombie_verdicts(NOW, [running], {42: samples}, {}, SHIPPED):
        return
    sampled = [agos for agos in times if agos]
    assert len(sampled) >= gpus
    start = NOW - 15 * MIN
    for agos in sampled:
        at = sorted(NOW - a for a in agos)
        seq = [t for t in at if t <= start][-1:] + [t for t in at if t > start] + [NOW]
        assert seq[0] <= start
        assert all(b - a <= 10 * MIN for a, b in itertools.pairwise(seq))


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
