"""Slurm's preemptions of free work, finished by the daemon when their grace ends.

The parser and the rule are checked on slurmctld's own output of a job in its grace and
past it (``tests/fixtures/slurm/22.05/preempt_grace``, captured by its ``capture.sh``);
the daemon's part on the fake Slurm: one requeue, no signal of its own, never twice, no
cap or cooldown spent, and a cycle asked for at the grace's end.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from daemon_helpers import NOW, config, daemon, job, world
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import PREEMPT_KIND, REQUEUE_KINDS, ledger, plan_cycle
from slurm_ml.model import JobState
from slurm_ml.policy.preempt_grace import grace_ends, in_grace, overdue
from slurm_ml.slurm.parse import parse_squeue_json
from slurm_ml.store.fake import FakeStore

CAPTURE = Path(__file__).parents[1] / "fixtures" / "slurm" / "22.05" / "preempt_grace"
#: from the capture's versions.txt: the preemptor's submission, and the preempted job
SUBMITTED, VICTIM, PREEMPTOR = 1796415126, 20, 24


def test_the_capture_is_what_its_notes_say() -> None:
    notes = (CAPTURE / "versions.txt").read_text()
    assert f"preemptor: {PREEMPTOR} submitted at {SUBMITTED}" in notes
    assert "free GraceTime: 00:00:30" in notes and "22.05.8" in notes


def test_a_job_in_its_grace_carries_its_preemption_and_its_new_end() -> None:
    jobs = parse_squeue_json((CAPTURE / "in_grace__squeue.json").read_text())
    victim = next(j for j in jobs if j.job_id == VICTIM)
    assert victim.state == JobState.RUNNING and victim.qos == "free"
    assert victim.preempt_time is not None and victim.end_time is not None
    # Slurm preempted within the rule's delay of the submission, and moved the end to
    # the grace's end (QOS free's 30 s)
    assert 0 <= victim.preempt_time - SUBMITTED <= 2
    assert victim.end_time - victim.preempt_time == 30
    assert [j.job_id for j in jobs if in_grace(j)] == [VICTIM]
    assert all(j.preempt_time is None for j in jobs if j.job_id != VICTIM)
    now = victim.preempt_time + 5
    assert overdue(now, jobs) == []
    assert grace_ends(now, jobs) == [victim.end_time + 1]


def test_past_its_grace_slurm_still_runs_it_and_the_rule_finds_it() -> None:
    """Two seconds past the grace slurmctld still lists the job RUNNING: its requeue
    waits for the time-limit sweep. That is what the daemon finishes."""
    jobs = parse_squeue_json((CAPTURE / "past_grace__squeue.json").read_text())
    victim = next(j for j in jobs if j.job_id == VICTIM)
    assert victim.state == JobState.RUNNING and victim.end_time is not None
    captured_at = SUBMITTED + 32  # capture.sh: 30 + 2 s after the submission
    assert captured_at >= victim.end_time
    assert [j.job_id for j in overdue(captured_at, jobs)] == [VICTIM]
    assert next(j for j in jobs if j.job_id == PREEMPTOR).state == JobState.PENDING


def test_once_requeued_there_is_nothing_left_to_finish() -> None:
    jobs = parse_squeue_json((CAPTURE / "preemptor_started__squeue.json").read_text())
    victim = next(j for j in jobs if j.job_id == VICTIM)
    assert victim.state == JobState.PENDING and victim.preempt_time is None
    assert next(j for j in jobs if j.job_id == PREEMPTOR).state == JobState.RUNNING
    assert overdue(SUBMITTED + 120, jobs) == [] and grace_ends(SUBMITTED, jobs) == []


def test_24_11_reports_the_same_preemption_in_its_own_shapes() -> None:
    """24.11 prints times as {set, infinite, number} and states as lists; the same rule
    reads them. In this capture Slurm's own sweep requeued the victim within 2 s of the
    grace's end (its README), so there was nothing left to finish at 32 s."""
    cap = CAPTURE.parents[1] / "24.11" / "preempt_grace"
    notes = (cap / "versions.txt").read_text()
    assert "24.11.5" in notes and "preemptor: 7 submitted at 1796419087" in notes
    jobs = parse_squeue_json((cap / "in_grace__squeue.json").read_text())
    victim = next(j for j in jobs if in_grace(j))
    assert (victim.job_id, victim.qos, victim.state) == (3, "free", JobState.RUNNING)
    assert victim.preempt_time == 1796419087 and victim.end_time == 1796419087 + 30
    assert grace_ends(1796419092, jobs) == [1796419118]
    assert overdue(1796419117, jobs) == [victim]
    after = parse_squeue_json((cap / "past_grace__squeue.json").read_text())
    assert overdue(1796419087 + 32, after) == [] and not any(in_grace(j) for j in after)


@given(st.integers(0, 200), st.integers(0, 120), st.booleans(),
       st.sampled_from(list(JobState)), st.sampled_from(["free", "alloc", "site-low"]))
def test_every_preemption_is_either_overdue_or_awaited(
        now_off: int, grace: int, requeue: bool, state: JobState, qos: str) -> None:
    preempted = NOW - 100
    j = job(7, "bob", "llm-pretrain", qos=qos, state=state, requeue=requeue,
            start=NOW - 3600, preempt_time=preempted, end_time=preempted + grace)
    now = NOW - 100 + now_off
    late, ends = overdue(now, [j]), grace_ends(now, [j])
    if state != JobState.RUNNING or not requeue or qos != "free":
        # not a preemption any more, or one for Slurm's sweep: a job Slurm cancels, or a
        # site QOS whose PreemptMode slurm-ml did not set
        assert late == [] and ends == []
    else:
        assert (late == [j]) == (now >= preempted + grace)
        assert (ends == [preempted + grace + 1]) == (now < preempted + grace)


# --------------------------------------------------------------------------- the daemon


def _graced(end: int) -> tuple[object, int]:
    """world() plus bob's free job on gpu05's neighbour slot, preempted by Slurm."""
    slurm = world()
    free = job(30, "bob", "llm-pretrain", gpus=4, qos="free", state=JobState.RUNNING,
               nodes="gpu05", start=NOW - 7200, preempt_time=end - 30, end_time=end)
    slurm.add_job(free)
    return slurm, free.job_id


def test_a_cycle_past_the_grace_requeues_the_job_once_without_a_signal() -> None:
    # a checkpoint grace of the daemon's own: this requeue must not add one
    cfg = config(contracts={"requeue_grace_s": 45.0, "requeue_signal": "USR1"})
    slurm, jid = _graced(end=NOW - 2)
    store = FakeStore()
    d = daemon(slurm, store, cfg=cfg)
    plan = plan_cycle(cfg, observe(cfg, slurm, store, NOW))
    mine = [a for a in plan.actions if a.job_id == jid]
    assert [(a.kind, a.decision) for a in mine] == [("requeue", PREEMPT_KIND)]
    assert "grace ended 2 s ago" in mine[0].reason
    result = d.cycle()
    assert result.report is not None
    assert [a.job_id for a in result.report.applied if a.decision == PREEMPT_KIND] == [jid]
    assert ("scontrol", "requeue", str(jid)) in slurm.calls
    assert all(sig[0] != jid for sig in slurm.signals)
    assert slurm.jobs[jid].state == JobState.PENDING
    # the next cycles see nothing to finish, and a replay of the same plan acts no more
    d.cycle()
    assert sum(c == ("scontrol", "requeue", str(jid)) for c in slurm.calls) == 1
    # Slurm chose the victim: neither the cluster cap nor the cooldown counts it
    assert PREEMPT_KIND not in REQUEUE_KINDS
    decided = store.decisions_for_job(jid)
    assert [d.kind for d in decided] == [PREEMPT_KIND]
    book = ledger(decided)
    assert jid not in book.last_requeue and book.recent == [] and book.lane_recent == []


def test_in_its_grace_the_job_is_no_victim_and_a_cycle_is_asked_for_its_end() -> None:
    slurm, jid = _graced(end=NOW + 20)
    cfg = config(fast_lane={"wake_min_gap_s": 10})
    d = daemon(slurm, FakeStore(), cfg=cfg)
    result = d.cycle()
    assert result.plan is not None
    assert result.plan.wake_at == (NOW + 21,)
    assert all(a.job_id != jid for a in result.plan.actions)
    assert d.wakes.next_at() == NOW + 21
    assert ("scontrol", "requeue", str(jid)) not in slurm.calls


@pytest.mark.parametrize("change", [{"requeue": False}, {"qos": "site-preempt-cancel"}])
def test_a_preemption_slurm_would_not_end_in_a_requeue_is_left_to_its_sweep(
        change: dict[str, object]) -> None:
    """Slurm cancels a preempted job that may not be requeued, and a site's own QOS may
    preempt by cancelling: a requeue there would not be what Slurm does."""
    slurm, jid = _graced(end=NOW - 5)
    slurm.jobs[jid] = replace(slurm.jobs[jid], **change)  # type: ignore[arg-type]
    plan = plan_cycle(config(), observe(config(), slurm, FakeStore(), NOW))
    assert all(a.job_id != jid for a in plan.actions) and plan.wake_at == ()


# No deadline: a whole plan_cycle per example, and the pass defers the interpreter's full
# collections until after it, so one example may pay for the one its predecessor deferred.
@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["gpu01", "gpu02", "gpu03", "gpu04"]),
                          st.integers(-120, 60), st.booleans(), st.booleans()),
                max_size=4, unique_by=lambda t: t[0]))
def test_the_plan_finishes_only_slurms_overdue_preemptions_once_each(
        extra: list[tuple[str, int, bool, bool]]) -> None:
    """Whatever mix of free jobs Slurm has preempted (grace over or not, requeueable or
    not), the plan's ``preempt_requeue`` actions are exactly the overdue requeueable ones,
    each once, and no other requeue of the cycle picks a job in its grace."""
    slurm = world()
    for i, (node, end_off, requeue, preempted) in enumerate(extra):
        slurm.add_job(job(40 + i, "bob", "llm-pretrain", gpus=1, qos="free",
                          state=JobState.RUNNING, nodes=node, start=NOW - 7200,
                          requeue=requeue, time_min=None,
                          preempt_time=NOW + end_off - 30 if preempted else None,
                          end_time=NOW + end_off if preempted else NOW + 3600))
    cfg = config()
    plan = plan_cycle(cfg, observe(cfg, slurm, FakeStore(), NOW))
    jobs = list(slurm.jobs.values())
    finished = [a.job_id for a in plan.actions if a.decision == PREEMPT_KIND]
    assert sorted(finished) == sorted(j.job_id for j in overdue(NOW, jobs))
    assert len(set(finished)) == len(finished)
    graced = {j.job_id for j in jobs if in_grace(j)}
    assert not [a for a in plan.actions if a.job_id in graced
                and a.decision != PREEMPT_KIND]
    assert list(plan.wake_at) == grace_ends(NOW, jobs)
