"""The site's own slurmdbd history as a simulator trace (issue 17 item 7), on the real
24.11 sacct capture of section H (tests/fixtures/slurm/24.11/daemon/, SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_ml.model import JobState, JobUsage
from slurm_ml.sim import traces
from slurm_ml.sim.traces.slurmdb import BEFORE, NO_GPU, trace_from_usage
from slurm_ml.sim.workload import LARGE, SMALL
from slurm_ml.slurm import parse
from slurm_ml.slurm.fake import FakeSlurm

DIR = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "24.11" / "daemon"
FACTS = json.loads((DIR / "daemon_contract_facts.json").read_text())
J = FACTS["jobs"]
START, END = FACTS["window"]


def captured_usage() -> list[JobUsage]:
    return parse.parse_sacct_usage((DIR / "daemon_job_usage_nodelist__sacct.txt").read_text(),
                                   START, END)


def test_the_captured_window_becomes_one_job_per_id() -> None:
    trace = trace_from_usage(captured_usage(), START, END, gpus_per_node=8, source="cap")
    got = {j.job_id: j for j in trace.jobs}
    assert set(got) == {J["per_task"], J["per_socket"], J["own_signal"], J["cli_signal"],
                        J["plain"]}
    task = got[J["per_task"]]
    assert (task.gpus, task.duration_s, task.team, task.user, task.gpu_type) == (
        4, 218.0, "llm-pretrain", "alice", "a100_80g")
    assert task.submit_s == 1796166839 - START and task.kind == SMALL
    # requeued jobs: first submission, the runs' time added up (70 + 5 s, 73 + 5 s)
    assert (got[J["own_signal"]].submit_s, got[J["own_signal"]].duration_s) == (
        1796166839 - START, 75.0)
    assert got[J["plain"]].duration_s == 78.0
    # never-started jobs have no GPUs in sacct; job 3 was submitted before the window
    assert trace.skipped == {NO_GPU: 4, BEFORE: 1}
    assert trace.rows == len(trace.jobs) + sum(trace.skipped.values())
    assert trace.epoch_s == START and trace.teams == ("llm-pretrain",)


def test_unallocated_work_has_no_minimum_runtime_and_gangs_are_large() -> None:
    runs = [JobUsage(job_id=1, user="u", account="a", qos="free",
                     state=JobState.COMPLETED, elapsed_s=100,
                     alloc_tres={"gres/gpu": 16.0}, start=1_000, end=1_100, submit=990),
            JobUsage(job_id=2, user="u", account="a", qos="alloc",
                     state=JobState.RUNNING, elapsed_s=0, alloc_tres={"gres/gpu": 2.0},
                     start=1_500, end=None, submit=1_400)]
    trace = trace_from_usage(runs, 900, 2_000, gpus_per_node=8, source="t")
    one, two = trace.jobs
    assert (one.min_runtime_s, one.kind, one.gpu_type) == (0.0, LARGE, None)
    assert two.min_runtime_s > 0 and two.duration_s == 500.0  # still running: to the end


def test_the_spec_reads_the_window_through_the_slurm_boundary() -> None:
    fake = FakeSlurm()
    fake.usage = captured_usage()
    trace = traces.load_trace(f"slurmdb?start={START}&end={END}", slurm=fake)
    assert len(trace.jobs) == 5 and trace.source == "slurmdbd (sacct)"
    assert ("sacct",) in [tuple(c[:1]) for c in fake.calls]
    days = traces.load_trace("slurmdb?days=1", slurm=fake, now=END)
    assert days.epoch_s == END - 86400
    iso = traces.load_trace("slurmdb?start=2026-12-01T23:00&end=2026-12-02", slurm=fake)
    assert iso.epoch_s == 1796166000


@pytest.mark.parametrize(("spec", "says"), [
    ("slurmdb", "say which history"),
    ("slurmdb:/tmp/x", "not a file"),
    ("slurmdb?start=yesterday", "neither epoch seconds nor an ISO date"),
    ("slurmdb?start=100&days=1", "start or days, not both"),
    ("slurmdb?start=200&end=100", "ends before it starts"),
    ("slurmdb?since=1", "unknown option"),
])
def test_bad_specs_say_what_to_give(spec: str, says: str) -> None:
    with pytest.raises(traces.TraceError, match=says):
        traces.load_trace(spec, slurm=FakeSlurm(), now=1_000_000)
