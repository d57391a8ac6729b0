"""The daemon's own SiteFactor push blanks a starved job's Reason (slurmctld shows None
until its scheduler next reaches the job: 22.05 on the dev cluster, 2026-12-06), so the
daemon keeps the reason Slurm gave before the push (``slurm_ml.daemon.reasons``): the
next cycle still sees the job starved. The fake models the blanking with
``FakeSlurm.scheduler_lag``."""

from __future__ import annotations

from dataclasses import replace

from daemon_helpers import NOW, daemon, job, world

from slurm_ml.daemon.loop import Daemon
from slurm_ml.daemon.reasons import kept_after, restored
from slurm_ml.model import JobState
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store.fake import FakeStore


def _requeues(result: object) -> list[tuple[int | None, str]]:
    report = getattr(result, "report", None)
    assert report is not None
    return [(a.job_id, a.reason) for a in report.applied if a.decision == "requeue"]


def _lagging() -> tuple[FakeSlurm, list[int], Daemon]:
    """``world()`` where Slurm's scheduler lags the daemon's pushes and alice's resumable
    job 1 started 30 s ago (protected for 30 s more: --time-min=1); a daemon whose clock
    is ``now[0]``."""
    slurm = world()
    slurm.scheduler_lag = True
    slurm.jobs[1] = replace(slurm.jobs[1], start_time=NOW - 30)
    now = [NOW]
    return slurm, now, daemon(slurm, FakeStore(), clock=lambda: now[0])


def test_the_job_stays_starved_while_slurm_shows_none_after_the_push() -> None:
    slurm, now, d = _lagging()
    first = d.cycle()
    assert first.plan is not None and 20 in first.plan.changed  # dave's job re-ranked
    assert _requeues(first) == []  # the only victim is still protected
    assert slurm.jobs[20].reason == "None"  # blanked by that push
    assert d.kept_reasons.get(20) == "Resources"

    now[0] = NOW + 60  # past the protection; Slurm has not reached job 20 again
    # a daemon that remembers nothing (restarted) does not see it starved...
    fresh = daemon(slurm, FakeStore(), clock=lambda: now[0], dry_run=True).cycle()
    assert fresh.plan is not None
    assert [a.job_id for a in fresh.plan.actions if a.kind == "requeue"] == []
    # ... this one does, and requeues for it
    second = d.cycle()
    assert [(j, "job 20" in r) for j, r in _requeues(second)] == [(1, True)]
    assert slurm.jobs[1].state == JobState.PENDING


def test_a_reason_slurm_states_again_replaces_the_kept_one() -> None:
    slurm, now, d = _lagging()
    d.cycle()
    assert d.kept_reasons.get(20) == "Resources"
    slurm.scheduler_pass()
    slurm.jobs[20] = replace(slurm.jobs[20], reason="JobHeldUser")  # then held
    now[0] = NOW + 60
    second = d.cycle()
    assert [j for j, _ in _requeues(second)] == []  # a held job is not starved
    assert 20 not in d.kept_reasons


def test_restored_and_kept_after() -> None:
    blank = job(5, "dave", "detection", reason="None")
    held = job(6, "dave", "detection", reason="JobHeldUser")
    said = job(7, "dave", "detection", reason="Priority")
    running = job(8, "dave", "detection", state=JobState.RUNNING, nodes="gpu05", start=NOW)
    kept = {5: "Resources", 6: "Resources", 7: "Resources", 8: "Resources"}

    jobs, ids = restored([blank, held, said, running], kept)
    assert [j.reason for j in jobs] == ["Resources", "JobHeldUser", "Priority", "None"]
    assert ids == {5}
    assert restored([blank], {}) == ((blank,), frozenset())

    # pushed this cycle, or restored (Slurm said nothing new): starving reasons only
    assert kept_after(jobs, pushed={6, 7}, restored_ids=ids) == {5: "Resources",
                                                               7: "Priority"}
    assert kept_after(jobs, pushed=(), restored_ids=()) == {}
