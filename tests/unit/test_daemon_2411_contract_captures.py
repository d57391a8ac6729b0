"""The calls issue 16 added, on live Slurm 24.11 output (section H of daemon_capture.py).

Recorded 2026-12-01 with CliSlurm itself against 24.11.5 in the Debian 13 chroot
(SOURCES.md, "Section H"). Jobs (daemon_contract_facts.json): 12 ``-n2
--gpus-per-task=2``; 13 ``--sockets-per-node=1 --gpus-per-socket=1``; 14 a batch script
with ``#SBATCH --signal=B:USR1@90`` that traps USR1, writes a marker and reads it when it
runs again; 15 ``--signal=USR2@120`` on the sbatch command line only; 16 a ``--wrap``
job that does not trap USR1; pending 17 ``--dependency``, 18 ``--begin=now+2hours``,
19 ``--hold``, 20 ``scontrol hold``, 21/22 8 GPUs on one node behind the others.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import CFG
from test_daemon_2411_captures import Replay, by_id, calls

from slurm_ml import gres
from slurm_ml.daemon import views
from slurm_ml.model import GpuRequest, JobState
from slurm_ml.policy import pending
from slurm_ml.slurm import parse
from slurm_ml.slurm.client import LIST_JOBS_ARGV, CliSlurm, JobSignal, parse_sbatch_signal
from slurm_ml.slurm.errors import SlurmCommandError

DIR = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "24.11" / "daemon"
STEM = "daemon_contract"


def read(name: str) -> str:
    return (DIR / name).read_text()


@cache
def jobs_of_facts() -> dict[str, int]:
    data: dict[str, Any] = json.loads(read(f"{STEM}_facts.json"))
    return {k: int(v) for k, v in data["jobs"].items()}


J = jobs_of_facts()


def listed() -> dict[int, Any]:
    run = Replay(answers={
        # recorded with `squeue --json`; list_jobs adds --states=all (no ended job here)
        LIST_JOBS_ARGV: read("daemon_list_jobs_reasons__squeue.json"),
        ("sprio", "-h", "-o", "%i %S %N"): read("daemon_list_jobs_reasons__sprio.txt")})
    return by_id(CliSlurm(run).list_jobs())


# ------------------------------------------------------------- GPUs per task and socket


def test_per_task_and_per_socket_jobs_count_every_gpu_they_hold() -> None:
    jobs = listed()
    task, sock = jobs[J["per_task"]], jobs[J["per_socket"]]
    assert task.gpus == (GpuRequest(2, "task", None),) and task.num_tasks == 2
    assert (task.alloc_gpus, task.total_gpus) == (4, 4)  # AllocTRES gres/gpu=4
    assert sock.gpus == (GpuRequest(1, "socket", None),) and sock.sockets_per_node == 1
    assert (sock.alloc_gpus, sock.total_gpus) == (1, 1)
    running = {r.job_id: r.gpus for r in views.running_jobs(CFG, list(jobs.values()))}
    assert running[J["per_task"]] == 4 and running[J["per_socket"]] == 1


def test_a_pending_per_task_request_is_counted_from_its_request() -> None:
    """Before it runs a job has no AllocTRES: per task x tasks is the whole request."""
    task = listed()[J["per_task"]]
    requests = [(g.gpu_type, g.per, g.count) for g in task.gpus]
    assert gres.slurm_gpu_total(requests, nodes=1, tasks=task.num_tasks,
                                sockets_per_node=None) == 4


# ------------------------------------------------------------- pending reasons


def test_each_pending_reason_as_24_11_prints_it() -> None:
    jobs = listed()
    got = {k: jobs[J[k]].reason for k in ("dependency", "begin", "held_user", "held_admin",
                                          "resources", "priority")}
    assert got == {"dependency": "Dependency", "begin": "BeginTime",
                   "held_user": "JobHeldUser", "held_admin": "JobHeldAdmin",
                   "resources": "Resources", "priority": "Priority"}
    # the same strings as squeue's own %r column at that moment
    ref = {int(w[0]): w[3] for w in (line.split() for line in
                                     read("ref_squeue_reasons.txt").splitlines()[1:])}
    assert all(ref[jobs[J[k]].job_id] == got[k] for k in got)


def test_only_the_jobs_that_wait_for_gpus_are_demand() -> None:
    jobs = listed()
    demand = {k for k in ("dependency", "begin", "held_user", "held_admin", "resources",
                          "priority") if pending.waits_for_gpus(jobs[J[k]].reason)}
    assert demand == {"resources", "priority"}
    assert not pending.starving(jobs[J["dependency"]].reason)


def test_a_run_killed_by_the_signal_and_requeued_waits_as_raised_signal() -> None:
    """Job 16 did not trap USR1: its shell died (FAILED 0:10), ``scontrol requeue`` took
    it back, and squeue named the signal as its reason until it ran again."""
    assert read("ref_sacct_plain_after_signal.txt").strip() == f"{J['plain']}|FAILED|0:10"
    line = read("ref_squeue_plain_after_requeue.txt").splitlines()[1]
    reason = line.split(None, 2)[2]
    assert reason == "RaisedSignal:10(User defined signal 1)"
    assert pending.code_of(reason) == "RaisedSignal"
    assert pending.reason_entry(reason).code == "RaisedSignal"  # named, not the catch-all
    assert not pending.waits_for_gpus(reason)


# ------------------------------------------------------------- a job's own --signal


def test_the_batch_scripts_own_signal_is_read_and_the_command_lines_is_not() -> None:
    assert parse_sbatch_signal(read("daemon_job_signal_own__scontrol.txt")) == JobSignal(
        "USR1", "batch", 90)
    # --signal=USR2@120 on the sbatch line is in neither the script nor squeue/scontrol
    assert parse_sbatch_signal(read("daemon_job_signal_cli__scontrol.txt")) is None
    assert "USR2" not in read("ref_scontrol_show_job_cli_signal.txt")
    # squeue --json's only "signal" keys are those of exit_code and derived_exit_code
    assert {line.split(":", 1)[1].strip() for line in
            read("ref_squeue_json_signal_fields.txt").splitlines()} == {
        '"signal": {', '"name": "cli-signal",', '"warnings": []'}
    assert parse_sbatch_signal(read("daemon_job_signal_wrap__scontrol.txt")) is None


def test_batch_script_of_an_unknown_job_exits_0_with_the_error_on_stderr() -> None:
    """24.11 prints "job script retrieval failed" to stderr and exits 0: the script is
    empty, so the job has no signal of its own."""
    (row,) = calls(STEM)["job_signal_nosuchjob"]
    assert row["rc"] == 0 and row["argv"] == ["scontrol", "write", "batch_script", "999999",
                                              "-"]
    assert read("daemon_job_signal_nosuchjob__scontrol.txt") == ""
    assert "Invalid job id" in read("daemon_job_signal_nosuchjob__scontrol.stderr.txt")
    run = Replay(answers={("scontrol", "write", "batch_script", "999999", "-"): ""})
    assert CliSlurm(run).job_signal(999999) is None


# ------------------------------------------------------------- signal, then requeue


def test_the_signal_argv_per_target_and_what_they_print() -> None:
    c = calls(STEM)
    assert c["signal_own_batch"][0]["argv"] == ["scancel", "--signal=USR1", "--batch",
                                                str(J["own_signal"])]
    assert c["signal_full"][0]["argv"] == ["scancel", "--signal=USR1", "--full",
                                           str(J["plain"])]
    assert c["signal_steps"][0]["argv"] == ["scancel", "--signal=USR1", str(J["per_task"])]
    for label in ("signal_own_batch", "signal_full", "signal_steps"):
        assert c[label][0]["rc"] == 0 and read(c[label][0]["file"]) == ""


@pytest.mark.parametrize("label", ["signal_nosuchjob", "signal_finished"])
def test_signalling_an_unknown_or_ended_job_is_a_named_error(label: str) -> None:
    (row,) = calls(STEM)[label]
    stderr = read(row["file"].replace(".txt", ".stderr.txt"))
    assert row["rc"] == 1 and "Invalid job id specified" in stderr
    argv = tuple(row["argv"])
    run = Replay(answers={argv: SlurmCommandError(list(argv), 1, stderr)})
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        CliSlurm(run).signal_job(int(argv[-1]), "USR1", target="batch")


def test_signalling_a_pending_job_hangs_so_the_daemon_signals_only_running_ones() -> None:
    """``scancel --signal --batch`` of a held job retried for 95 s, then exited 228
    (ESLURM_TRANSITION_STATE_NO_UPDATE 2020 mod 256); CliSlurm's 30 s timeout cut it."""
    results = json.loads(read(f"{STEM}_facts.json"))["results"]
    assert results["signal_pending"].startswith("'raised SlurmTimeout")
    assert "signal_pending" not in calls(STEM)  # a timeout leaves no captured output


def test_the_checkpoint_marker_round_trip() -> None:
    """The signalled job wrote its marker, was requeued, and read it when it ran again."""
    marker, log = read("ref_ckpt_marker_and_log.txt").splitlines()
    stamp = marker.split()[0]
    assert marker == f"{stamp} usr1" and log == f"restart 1 after {stamp} usr1"
    assert calls(STEM)["requeue_after_signal"][0]["rc"] == 0
    requeued = read("ref_scontrol_show_job_requeued.txt")
    assert "Restarts=1" in requeued and "Reason=BeginTime" in requeued  # restart delay


# ------------------------------------------------------------- sacct NodeList


def test_sacct_nodelist_names_each_runs_node_and_none_for_jobs_that_never_ran() -> None:
    (row,) = calls(STEM)["job_usage_nodelist"]
    assert row["argv"][-1] == "--format=" + ",".join(parse.SACCT_FIELDS)
    start, end = json.loads(read(f"{STEM}_facts.json"))["window"]
    usage = parse.parse_sacct_usage(read(row["file"]), start, end)
    runs = [(u.job_id, u.state, u.nodes) for u in usage]
    assert (J["per_socket"], JobState.CANCELLED, "tnode2") in runs
    # both runs of the requeued jobs, each with its node
    assert [(s, n) for j, s, n in runs if j == J["own_signal"]] == [
        (JobState.REQUEUED, "tnode1"), (JobState.CANCELLED, "tnode1")]
    assert [(s, n) for j, s, n in runs if j == J["plain"]] == [
        (JobState.REQUEUED, "tnode1"), (JobState.CANCELLED, "tnode1")]
    assert all(n == "" for j, _, n in runs if j in (J["resources"], J["priority"]))
    assert "None assigned" in read(row["file"])  # what 24.11 prints for no node
