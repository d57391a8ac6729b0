"""Requeues that let a job checkpoint, on the real dev cluster and PostgreSQL.

The daemon's Applier (real CliSlurm, real PostgresStore) is handed a planned requeue of
three running batch jobs, as a contract or zombie requeue would plan it: one that traps
the default SIGUSR1, one whose ``#SBATCH --signal=B:USR2`` asks for USR2 instead, one that
traps nothing (its shell dies of the signal). Each cycle is an ``apply`` at the real
clock: the first signals, one inside the grace does nothing, the first after it requeues
(with the plan no longer asking: the store alone carries the promise). The trapping jobs
write a checkpoint marker on the signal and, on their next run, a marker that they
resumed from it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from slurm_jobs import show, wait_state

from slurm_ml import proc
from slurm_ml.config.schema import ContractsConfig
from slurm_ml.daemon.apply import SIGNAL_KIND, Applier, ApplyReport
from slurm_ml.daemon.plan import Action, Plan
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.store.migrate import migrate
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.records import derive_key

# three jobs started (120 s each at worst), a 20 s grace, then Slurm's requeue delay
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
GRACE_S = 20
CONTRACTS = replace(ContractsConfig(), requeue_signal="USR1", requeue_signal_target="batch",
                    requeue_grace_s=float(GRACE_S))

TRAPPING = """#!/bin/bash
{sbatch}
dir={dir}
got() {{
  echo "sig=$1 step=$step" > "$dir/checkpoint.tmp" && mv "$dir/checkpoint.tmp" "$dir/checkpoint"
  echo "$1" >> "$dir/signals"
}}
trap 'got USR1' USR1
trap 'got USR2' USR2
if [ -f "$dir/checkpoint" ]; then
  echo "resumed $(cat "$dir/checkpoint") restarts=${{SLURM_RESTART_COUNT:-0}}" > "$dir/resumed"
fi
echo "run" >> "$dir/runs"
step=0
while true; do step=$((step + 1)); sleep 1 & wait $!; done
"""
# bash's default for SIGUSR1 is to die of it
UNTRAPPED = """#!/bin/bash
dir={dir}
echo "run" >> "$dir/runs"
sleep 600 & wait $!
"""


def _job_dir(name: str) -> Path:
    path = Path(os.environ["SLURM_ML_DEVCLUSTER"]) / "jobs" / f"ckpt-{name}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    path.chmod(0o777)
    return path


def _submit(script: str, workdir: Path, jobs: list[int]) -> int:
    path = workdir / "job.sh"
    path.write_text(script)
    path.chmod(0o755)
    res = proc.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", f"--chdir={workdir}",
                    "--output=/dev/null", "--account=llm-pretrain", "--time=15", "--requeue",
                    "--gres=gpu:v100:1", str(path)], check=False, timeout_s=30)
    assert res.returncode == 0, res.stderr
    jobs.append(int(res.stdout.strip().split(";")[0]))
    return jobs[-1]


def _plan(actions: list[Action]) -> Plan:
    """A cycle's plan with only these requeues (the Applier reads no fair share)."""
    now = int(time.time())
    return Plan(now=now, cycle=now, fair=cast(Any, None), site_factors={}, changed={},
                actions=tuple(actions), snapshots=())


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait_lines(path: Path, count: int, timeout_s: float) -> list[str]:
    """The file's lines once it has ``count`` (RUNNING is slurmctld's word, not the shell's)."""
    deadline = time.monotonic() + timeout_s
    while len(lines := _lines(path)) < count and time.monotonic() < deadline:
        time.sleep(0.5)
    return lines


def _wait_file(path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.5)
    return path.read_text()


def _wait_not_running(job: int, deadline: float) -> None:
    """Until slurmctld no longer has ``job`` RUNNING, or the monotonic ``deadline``."""
    while show(job)["JobState"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)


@pytest.fixture(scope="module")
def round_trip(slurm_conf: str, pg_module_dsn: str) -> Iterator[dict[str, Any]]:
    migrate(pg_module_dsn)
    jobs: list[int] = []
    dirs = {k: _job_dir(k) for k in ("default", "own", "untrapped")}
    try:
        ids = {
            "default": _submit(TRAPPING.format(sbatch="", dir=dirs["default"]),
                               dirs["default"], jobs),
            "own": _submit(TRAPPING.format(sbatch="#SBATCH --signal=B:USR2@30",
                                           dir=dirs["own"]), dirs["own"], jobs),
            "untrapped": _submit(UNTRAPPED.format(dir=dirs["untrapped"]), dirs["untrapped"],
                                 jobs),
        }
        starts = {}
        for name, job in ids.items():
            wait_state(job, {"RUNNING"}, timeout_s=120)
            _wait_file(dirs[name] / "runs", 30)  # its shell runs, traps set
            starts[name] = show(job)["StartTime"]
        actions = [Action(kind="requeue", decision="requeue", job_id=job, gpus=1,
                          key=derive_key("test.requeue_checkpoint", job, starts[name]),
                          reason=f"integration test: make room ({name})")
                   for name, job in ids.items()]
        with PostgresStore(pg_module_dsn) as store:
            applier = Applier(CliSlurm(), store, contracts=CONTRACTS)
            first = applier.apply(_plan(actions))
            signalled_at = time.monotonic()
            _wait_file(dirs["default"] / "checkpoint", 15)
            _wait_file(dirs["own"] / "checkpoint", 15)
            # The untrapped job's shell dies of the signal, but slurmctld hears of it only
            # once slurmstepd and slurmd have reported it: a moment later, seconds on a
            # loaded host (two dev clusters and the unit tests at once). Wait for that,
            # still well inside the grace, before looking.
            _wait_not_running(ids["untrapped"], signalled_at + GRACE_S / 2)
            during = {name: show(job) for name, job in ids.items()}
            inside = applier.apply(_plan(actions[:1]))  # the plan asks again for one
            time.sleep(max(0.0, GRACE_S + 1 - (time.monotonic() - signalled_at)))
            after = applier.apply(_plan([]))  # and then no more: requeued all the same
            again = applier.apply(_plan([]))
            decisions = {name: store.decisions_for_job(job) for name, job in ids.items()}
            audit = [(e.idempotency_key, e.details.get("phase")) for e in store.audit_entries()]
        restarted = {name: wait_state(job, {"RUNNING"}, timeout_s=300)
                     for name, job in ids.items()}
        for name in ("default", "own"):
            _wait_file(dirs[name] / "resumed", 30)
        _wait_lines(dirs["untrapped"] / "runs", 2, 30)  # its second run has written its line
        yield {"ids": ids, "dirs": dirs, "actions": actions, "first": first, "inside": inside,
               "after": after, "again": again, "during": during, "restarted": restarted,
               "decisions": decisions, "audit": audit}
    finally:
        if jobs:
            proc.run(["scancel", *map(str, jobs)], check=False)


def _ids(report: ApplyReport, attr: str) -> set[int | None]:
    return {a.job_id for a in getattr(report, attr)}


def test_the_daemon_signals_then_requeues_after_the_grace(round_trip: dict[str, Any]) -> None:
    ids = round_trip["ids"]
    assert _ids(round_trip["first"], "signalled") == set(ids.values()), round_trip["first"]
    assert not round_trip["first"].applied and not round_trip["first"].failed
    # signalled, not requeued: the trapping jobs still run their first run
    assert round_trip["during"]["default"]["JobState"] == "RUNNING"
    assert round_trip["during"]["default"].get("Restarts", "0") == "0"
    assert _ids(round_trip["inside"], "waiting") == set(ids.values())
    assert not round_trip["inside"].applied and not round_trip["inside"].signalled
    assert _ids(round_trip["after"], "applied") == set(ids.values()), round_trip["after"]
    assert not round_trip["again"].applied and not round_trip["again"].signalled
    for fields in round_trip["restarted"].values():
        assert int(fields.get("Restarts", "0")) == 1, fields


def test_the_checkpoint_marker_round_trip(round_trip: dict[str, Any]) -> None:
    dirs = round_trip["dirs"]
    checkpoint = (dirs["default"] / "checkpoint").read_text().strip()
    assert checkpoint.startswith("sig=USR1 step=")
    resumed = (dirs["default"] / "resumed").read_text().strip()
    assert resumed == f"resumed {checkpoint} restarts=1", resumed
    assert _lines(dirs["default"] / "signals") == ["USR1"]  # once, across four cycles
    assert _lines(dirs["default"] / "runs") == ["run", "run"]


def test_the_jobs_own_batch_script_signal_is_sent_instead(round_trip: dict[str, Any]) -> None:
    dirs = round_trip["dirs"]
    assert _lines(dirs["own"] / "signals") == ["USR2"]
    assert (dirs["own"] / "resumed").read_text().startswith("resumed sig=USR2 step=")
    sig = [d for d in round_trip["decisions"]["own"] if d.kind == SIGNAL_KIND]
    assert sig[0].details["source"] == "job" and sig[0].details["target"] == "batch"


def test_a_job_that_died_of_the_signal_is_requeued_and_runs_again(
        round_trip: dict[str, Any]) -> None:
    dirs = round_trip["dirs"]
    assert round_trip["during"]["untrapped"]["JobState"] != "RUNNING"  # its shell died
    assert _lines(dirs["untrapped"] / "runs") == ["run", "run"]


def test_signal_grace_and_requeue_are_one_audited_action(round_trip: dict[str, Any]) -> None:
    for name, action in zip(round_trip["ids"], round_trip["actions"], strict=True):
        rows = [(k, p) for k, p in round_trip["audit"] if k.startswith(action.key)]
        assert rows == [(action.key, "intent"), (f"{action.key}/signal", "signal"),
                        (f"{action.key}/done", "done")], rows
        kinds = [d.kind for d in round_trip["decisions"][name]]
        assert kinds == [SIGNAL_KIND, "requeue"], kinds
