"""Requeues that let a job checkpoint: the daemon signals first, requeues after the grace,
in two phases across cycles, once each even across a crash."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from daemon_helpers import CFG, NOW, world

from slurm_ml.config.schema import ContractsConfig, signal_name
from slurm_ml.daemon.apply import SIGNAL_KIND, Applier, ApplyReport
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import Action, Plan, plan_cycle
from slurm_ml.model import JobState
from slurm_ml.slurm.client import CliSlurm, parse_sbatch_signal, parse_signal_spec
from slurm_ml.slurm.errors import SlurmCommandError
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.slurm.protocol import JobSignal
from slurm_ml.store.fake import FakeStore

CONTRACTS = replace(CFG.policy.contracts, requeue_signal="USR1", requeue_signal_target="batch",
                    requeue_grace_s=60.0)


def cycle(slurm: FakeSlurm, store: FakeStore, at: int, contracts: ContractsConfig = CONTRACTS,
          **kw: Any) -> tuple[Plan, ApplyReport]:
    plan = plan_cycle(CFG, observe(CFG, slurm, store, at))
    return plan, Applier(slurm, store, contracts=contracts, **kw).apply(plan)


def requeues(slurm: FakeSlurm) -> list[tuple[str, ...]]:
    return [c for c in slurm.calls if c[:2] == ("scontrol", "requeue")]


def test_a_requeue_signals_first_and_requeues_only_once_the_grace_has_passed() -> None:
    slurm, store = world(), FakeStore()
    plan, first = cycle(slurm, store, NOW)
    assert [(a.decision, a.job_id) for a in first.signalled] == [("requeue", 1)]
    assert slurm.signals == [(1, "USR1", "batch")]
    assert slurm.jobs[1].state == JobState.RUNNING and requeues(slurm) == []
    assert not first.applied

    _, inside = cycle(slurm, store, NOW + 30)  # the plan asks again: the grace still runs
    assert [a.job_id for a in inside.waiting] == [1] and not inside.applied
    assert slurm.signals == [(1, "USR1", "batch")] and requeues(slurm) == []

    _, after = cycle(slurm, store, NOW + 61)
    assert [(a.decision, a.job_id) for a in after.applied] == [("requeue", 1)]
    assert slurm.jobs[1].state == JobState.PENDING and len(requeues(slurm)) == 1
    assert slurm.signals == [(1, "USR1", "batch")]

    key = next(a.key for a in plan.actions if a.job_id == 1)
    assert [d.kind for d in store.decisions_for_job(1)] == [SIGNAL_KIND, "requeue"]
    rows = [(e.idempotency_key, e.action, e.details.get("phase"))
            for e in store.audit_entries() if e.target == "job 1"]
    assert rows == [(key, "requeue", "intent"), (f"{key}/signal", "requeue", "signal"),
                    (f"{key}/done", "requeue", "done")]
    done = store.audit_entries()[-1].details
    assert (done["signal"], done["grace_s"], done["waited_s"]) == ("USR1", 60.0, 61)


class Crash(Exception):
    pass


class DiesAfterSignalling(FakeSlurm):
    """The daemon's process dies right after scancel --signal returned."""

    def signal_job(self, job_id: int, signal: str, *, target: str = "batch") -> None:
        super().signal_job(job_id, signal, target=target)
        raise Crash


def _crashed_world() -> tuple[FakeSlurm, FakeStore]:
    slurm, store = world(), FakeStore()
    slurm.__class__ = DiesAfterSignalling
    with pytest.raises(Crash):
        cycle(slurm, store, NOW)
    slurm.__class__ = FakeSlurm
    assert slurm.signals == [(1, "USR1", "batch")] and slurm.jobs[1].state == JobState.RUNNING
    return slurm, store


def test_a_crash_after_the_signal_neither_signals_twice_nor_forgets_the_requeue() -> None:
    slurm, store = _crashed_world()
    _, restart = cycle(slurm, store, NOW + 10)  # same plan, re-derived by the next run
    assert [a.job_id for a in restart.waiting] == [1]
    _, after = cycle(slurm, store, NOW + 60)
    assert [a.job_id for a in after.applied] == [1]
    assert slurm.signals == [(1, "USR1", "batch")] and len(requeues(slurm)) == 1
    _, later = cycle(slurm, store, NOW + 120)
    assert not later.applied and not later.signalled and len(requeues(slurm)) == 1


def test_a_signalled_requeue_is_finished_when_the_plan_no_longer_asks_for_it() -> None:
    slurm, store = _crashed_world()
    for starved in (20, 21):  # nobody waits any more: the plan has no requeue
        slurm.jobs.pop(starved)
    plan, after = cycle(slurm, store, NOW + 70)
    assert not [a for a in plan.actions if a.kind == "requeue"]
    assert [(a.decision, a.job_id) for a in after.applied] == [("requeue", 1)]
    assert slurm.jobs[1].state == JobState.PENDING and slurm.signals == [(1, "USR1", "batch")]


def test_the_jobs_own_signal_is_used_when_it_set_one() -> None:
    slurm, store = world(), FakeStore()
    slurm.job_signals[1] = JobSignal("USR2", "steps", 90)
    cycle(slurm, store, NOW)
    assert slurm.signals == [(1, "USR2", "steps")]
    sig = [d for d in store.decisions_for_job(1) if d.kind == SIGNAL_KIND]
    assert sig[0].details["source"] == "job" and "SIGUSR2" in sig[0].reason


@pytest.mark.parametrize("knobs", [{"requeue_grace_s": 0.0}, {"requeue_signal": ""}])
def test_no_grace_or_no_signal_is_a_plain_requeue_at_once(knobs: dict[str, Any]) -> None:
    slurm, store = world(), FakeStore()
    _, report = cycle(slurm, store, NOW, contracts=replace(CONTRACTS, **knobs))
    assert [a.job_id for a in report.applied] == [1] and slurm.signals == []
    assert slurm.jobs[1].state == JobState.PENDING


def test_a_job_that_requeued_itself_on_the_signal_is_not_requeued_again() -> None:
    slurm, store = world(), FakeStore()
    cycle(slurm, store, NOW)
    slurm.requeue([1])  # Lightning's and submitit's handlers requeue their own job
    own = len(requeues(slurm))
    _, after = cycle(slurm, store, NOW + 61)
    assert [a.job_id for a in after.applied] == [1] and len(requeues(slurm)) == own
    done = [d for d in store.decisions_for_job(1) if d.kind == "requeue"]
    assert done[0].details["requeued_by"] == "the job itself"  # counted for the cooldown


class RerunsEnded(FakeSlurm):
    """slurmctld requeues an ended batch job it still lists, and runs it again."""

    def requeue(self, job_ids: Any) -> None:
        self._call("scontrol", "requeue", *map(str, job_ids))
        for jid in job_ids:
            self.jobs[jid] = replace(self.jobs[jid], state=JobState.PENDING, nodes="",
                                     start_time=None, end_time=None)


def test_a_job_the_signal_ended_is_requeued_and_a_cancelled_one_is_not() -> None:
    slurm, store = world(), FakeStore()
    slurm.__class__ = RerunsEnded
    cycle(slurm, store, NOW)
    slurm.set_job(1, state=JobState.FAILED, end_time=NOW + 1)  # its shell died of SIGUSR1
    _, after = cycle(slurm, store, NOW + 61)
    assert [a.job_id for a in after.applied] == [1]
    assert slurm.jobs[1].state == JobState.PENDING and len(requeues(slurm)) == 1

    slurm, store = world(), FakeStore()
    cycle(slurm, store, NOW)
    slurm.set_job(1, state=JobState.CANCELLED, end_time=NOW + 1)  # its owner cancelled it
    _, after = cycle(slurm, store, NOW + 61)
    assert not after.applied and [a.job_id for a in after.already] == [1]
    assert requeues(slurm) == []


def test_every_requeue_kind_is_signalled_and_a_dry_run_signals_nothing() -> None:
    slurm, store = world(), FakeStore()
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    zombie = Action(kind="requeue", decision="zombie_requeue", key="zr-2", reason="idle",
                    job_id=2, gpus=4)
    plan = replace(plan, actions=(zombie,))
    Applier(slurm, store, contracts=CONTRACTS).apply(plan, dry_run=True)
    assert slurm.signals == []
    report = Applier(slurm, store, contracts=CONTRACTS).apply(plan)
    assert [a.decision for a in report.signalled] == ["zombie_requeue"]
    assert slurm.signals == [(2, "USR1", "batch")]


def test_a_failed_signal_still_leads_to_the_requeue() -> None:
    class Refuses(FakeSlurm):
        def signal_job(self, job_id: int, signal: str, *, target: str = "batch") -> None:
            raise SlurmCommandError(("scancel",), 1, "Access/permission denied")

    slurm, store = world(), FakeStore()
    slurm.__class__ = Refuses
    _, first = cycle(slurm, store, NOW)
    assert [a.job_id for a in first.signalled] == [1]
    sig = [e for e in store.audit_entries() if e.details.get("phase") == "signal"]
    assert "permission" in sig[0].details["error"]
    _, after = cycle(slurm, store, NOW + 60)
    assert [a.job_id for a in after.applied] == [1]


# ------------------------------------------------------------------ the job's own --signal


@pytest.mark.parametrize(("spec", "want"), [
    ("USR1@90", JobSignal("USR1", "steps", 90)),
    ("B:SIGUSR1@90", JobSignal("USR1", "batch", 90)),
    ("RB:10", JobSignal("10", "batch", None)),
    ("SIGTERM", JobSignal("TERM", "steps", None)),
    ("B:NOPE@3", None),
    ("", None),
])
def test_signal_specs_read_as_sbatch_reads_them(spec: str, want: JobSignal | None) -> None:
    assert parse_signal_spec(spec) == want


def test_the_batch_script_signal_is_read_from_its_sbatch_lines_only() -> None:
    script = ("#!/bin/bash\n#SBATCH --gres=gpu:1\n# a comment\n\n"
              "#SBATCH --signal=B:USR1@120 --requeue  # checkpoint\n"
              "srun python train.py\n#SBATCH --signal=USR2\n")
    assert parse_sbatch_signal(script) == JobSignal("USR1", "batch", 120)
    assert parse_sbatch_signal("#!/bin/sh\n#SBATCH --signal SIGUSR2@60\nx\n") == JobSignal(
        "USR2", "steps", 60)
    assert parse_sbatch_signal("#!/bin/sh\nsleep 1\n") is None


def test_cli_signal_job_and_job_signal_run_scancel_and_scontrol() -> None:
    seen: list[list[str]] = []

    class Runner:
        timeout_s = 30.0

        def __call__(self, argv: list[str], **_kw: Any) -> str:
            seen.append(argv)
            if argv[:2] == ["scontrol", "write"] and argv[3] == "7":
                raise SlurmCommandError(argv, 1, "Invalid job id specified")
            return "#!/bin/bash\n#SBATCH --signal=B:USR1@90\nsleep 1\n"

    cli = CliSlurm(Runner())  # type: ignore[arg-type]
    cli.signal_job(5, "USR1", target="batch")
    cli.signal_job(5, "USR2", target="full")
    cli.signal_job(5, "10", target="steps")
    assert cli.job_signal(5) == JobSignal("USR1", "batch", 90)
    assert cli.job_signal(7) is None  # unreadable: the default signal is used
    assert seen[:3] == [["scancel", "--signal=USR1", "--batch", "5"],
                        ["scancel", "--signal=USR2", "--full", "5"],
                        ["scancel", "--signal=10", "5"]]
    assert seen[3] == ["scontrol", "write", "batch_script", "5", "-"]


def test_signal_knobs_are_checked() -> None:
    import yaml

    from slurm_ml.assets import DEFAULT_CONFIG
    from slurm_ml.config import ConfigError, parse_config

    assert signal_name("sigusr1") == "USR1" and signal_name("10") == "10"
    assert signal_name("USR9") is None and signal_name("99") is None
    for knob, value in (("requeue_signal", "USR9"), ("requeue_signal_target", "shell"),
                        ("requeue_grace_s", -1)):
        data = yaml.safe_load(DEFAULT_CONFIG.read_text())
        data["policy"]["contracts"][knob] = value
        with pytest.raises(ConfigError, match=knob):
            parse_config(data)


def _lane_plan(slurm: FakeSlurm, store: FakeStore) -> Plan:
    plan = plan_cycle(CFG, observe(CFG, slurm, store, NOW))
    lane = Action(kind="requeue", decision="lane_requeue", key="lr-1",
                  reason="room for fast-lane job 99", job_id=1, gpus=4,
                  details={"for_job": 99})
    return replace(plan, actions=(lane,))


@pytest.mark.parametrize(("lane_grace", "want"), [(20.0, 20.0), (None, 60.0), (0.0, 0.0)])
def test_the_lanes_requeues_have_a_grace_of_their_own(lane_grace: float | None,
                                                      want: float) -> None:
    """A debug job waits through its victim's grace, so the lane's requeues take
    ``fast_lane.requeue_grace_s`` (None: the contracts' 60 s); 0 is a plain requeue."""
    slurm, store = world(), FakeStore()
    applier = Applier(slurm, store, contracts=CONTRACTS, lane_grace_s=lane_grace)
    plan = _lane_plan(slurm, store)
    assert applier.grace_for(plan.actions[0]) == want
    report = applier.apply(plan)
    if want == 0:
        assert [a.job_id for a in report.applied] == [1] and slurm.signals == []
        return
    assert [a.job_id for a in report.signalled] == [1]
    signal = next(d for d in store.decisions_for_job(1) if d.kind == SIGNAL_KIND)
    assert signal.details["requeue_after"] == NOW + int(want)
    later = replace(plan, now=NOW + int(want) - 1)
    assert [a.job_id for a in applier.apply(later).waiting] == [1]
    done = applier.apply(replace(plan, now=NOW + int(want)))
    assert [a.job_id for a in done.applied] == [1] and len(requeues(slurm)) == 1


def test_inside_the_grace_no_cycle_requeues_again_or_past_the_cap() -> None:
    """While job 1's grace runs it is as good as requeued: the ledger charges its GPUs
    from the signal on and cools it down, and the job it makes room for gets no second
    victim; the cycles inside the grace (woken ones come every few seconds) only wait,
    and the one after it requeues job 1, once."""
    from slurm_ml.daemon.plan import ledger, room_coming, signalled

    slurm, store = world(), FakeStore()
    plan, first = cycle(slurm, store, NOW)
    (action,) = [a for a in plan.actions if a.kind == "requeue"]
    assert [a.job_id for a in first.signalled] == [1]
    history = observe(CFG, slurm, store, NOW + 10).history
    (sig,) = signalled(history)
    assert (sig.victim, sig.kind, sig.gpus, sig.at, sig.requeue_after) == (
        1, "requeue", 4, NOW, NOW + 60)
    assert sig.for_job == action.details["for_job"]
    book = ledger(history)
    assert book.recent == [(NOW, 4)] and book.last_requeue == {1: NOW}
    assert room_coming(history, NOW + 10) == {sig.for_job}
    for at in (NOW + 10, NOW + 20, NOW + 40):
        inside, report = cycle(slurm, store, at)
        assert not [a for a in inside.actions if a.kind == "requeue"], inside.actions
        assert [a.job_id for a in report.waiting] == [1] and not report.signalled
    _, after = cycle(slurm, store, NOW + 61)
    assert [(a.decision, a.job_id) for a in after.applied] == [("requeue", 1)]
    assert len(requeues(slurm)) == 1 and slurm.signals == [(1, "USR1", "batch")]
    # the requeue's own decision replaces the signal in the ledger: counted once
    history = observe(CFG, slurm, store, NOW + 62).history
    assert signalled(history) == [] and ledger(history).recent == [(NOW + 61, 4)]
