"""Parsers on real captured Slurm output (tests/fixtures/slurm/<version>/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_ml.model import GpuRequest, Job, JobState
from slurm_ml.slurm import parse
from slurm_ml.slurm.errors import SlurmParseError
from slurm_ml.slurm.tres import gpu_type_of_gres, gpus_in_tres, parse_gpu_spec, parse_tres
from slurm_ml.slurm.version import SlurmVersion

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
V22 = FIX / "22.05"


def read(version: str, name: str) -> str:
    return (FIX / version / name).read_text()


# ------------------------------------------------------------------ 22.05


def test_squeue_json_2205_normalises_every_gpu_scope() -> None:
    jobs = {j.job_id: j for j in parse.parse_squeue_json(read("22.05", "squeue.json"))}
    assert len([j for j in jobs.values() if j.state is not JobState.CANCELLED]) == 10
    by_req = {j.job_id: j.gpus for j in jobs.values()}
    assert GpuRequest(2, "node", "a100_80g") in by_req[11]
    assert by_req[12] == (GpuRequest(3, "job", None),)
    assert by_req[13] == (GpuRequest(1, "node", None),) and jobs[13].num_nodes == 2
    assert by_req[14] == (GpuRequest(1, "task", None),)
    assert jobs[13].total_gpus == 2


def test_squeue_json_2205_fields() -> None:
    jobs = {j.job_id: j for j in parse.parse_squeue_json(read("22.05", "squeue.json"))}
    j = jobs[15]
    assert (j.user, j.account, j.qos) == ("alice", "detection", "alloc")
    assert j.state is JobState.RUNNING
    assert (j.time_limit_min, j.time_min_min, j.requeue) == (60, 10, True)
    assert jobs[16].features == "a100_80g" and jobs[16].state is JobState.PENDING
    assert jobs[18].comment == "gpu_mem=30G"
    assert jobs[19].qos == "free"
    assert jobs[11].time_min_min is None  # 0 means "not set"
    assert all(j.site_factor is None for j in jobs.values())  # 22.05 JSON has no site_factor


def test_scontrol_jobs_2205_agree_with_squeue_json() -> None:
    one = {j.job_id: j for j in parse.parse_scontrol_jobs(read("22.05", "scontrol_show_job_o.txt"))}
    js = {j.job_id: j for j in parse.parse_squeue_json(read("22.05", "squeue.json"))}
    assert set(js) <= set(one)
    for jid, j in js.items():
        o = one[jid]
        assert (o.user, o.account, o.qos, o.state) == (j.user, j.account, j.qos, j.state)
        assert o.gpus == j.gpus, jid
        assert o.time_limit_min == j.time_limit_min
        assert o.time_min_min == j.time_min_min


def test_scontrol_nodes_2205() -> None:
    text = read("22.05", "scontrol_show_node_o.txt")
    nodes = {n.name: n for n in parse.parse_scontrol_nodes(text)}
    assert sorted(nodes) == [f"gpu0{i}" for i in range(1, 7)]
    assert nodes["gpu01"].gpu_type == "a100_80g" and nodes["gpu01"].gpus_total == 8
    assert nodes["gpu05"].features == ("v100", "pcie")
    g6 = nodes["gpu06"]
    assert g6.drained and g6.state == "MIXED"
    assert g6.reason == "slurm-ml: nvlink gpu3 inactive"  # the [user@time] stamp is dropped
    assert not nodes["gpu03"].drained and nodes["gpu03"].state == "IDLE"
    assert nodes["gpu01"].cpus == 64 and nodes["gpu01"].real_memory_mb == 512000


def test_sacct_usage_2205_clips_to_window_and_skips_unstarted() -> None:
    text = read("22.05", "sacct_truncate_p.txt")
    usage = parse.parse_sacct_usage(text, 0, 2**40)
    by_id = {u.job_id: u for u in usage}
    assert by_id[23].gpus == 2 and by_id[23].elapsed_s == 5 and by_id[23].qos == "alloc"
    assert by_id[23].alloc_tres["gres/gpu:a100_80g"] == 2
    assert by_id[25].qos == "free" and by_id[25].gpus == 4
    assert by_id[24].state is JobState.COMPLETED and by_id[26].state is JobState.FAILED
    assert by_id[23].gpu_hours() == pytest.approx(2 * 5 / 3600)
    # the array task records are charged per task, under the array's job id
    assert sum(1 for u in usage if u.job_id == 17) == 3
    # a window that ends mid-job charges only the part inside it
    start = by_id[23].start
    assert start is not None
    clipped = {u.job_id: u for u in parse.parse_sacct_usage(text, start + 2, start + 4)}
    assert clipped[23].elapsed_s == 2


def test_sprio_site_2205() -> None:
    assert parse.parse_sprio_site(read("22.05", "sprio_site.txt")) == {16: 0, 17: 0, 19: 0}


def test_runaway_none_2205() -> None:
    assert parse.parse_runaway(read("22.05", "sacctmgr_runawayjobs.txt")) == []


def test_error_captures_2205_name_the_problem() -> None:
    for f in V22.glob("err_*.stderr.txt"):
        text = f.read_text()
        assert "exit=1" in text and ("Invalid" in text), f.name


def test_version_facts() -> None:
    v = SlurmVersion.parse(read("22.05", "versions.txt"))
    assert str(v) == "22.05.8" and not v.scontrol_json and v.gres_tres_separator == ":"
    v24 = SlurmVersion.parse("slurm 24.11.5")
    assert v24.scontrol_json and v24.gres_tres_separator == "/"
    with pytest.raises(Exception, match=r"older than 22\.05"):
        SlurmVersion.parse("slurm 21.08.8")
    with pytest.raises(SlurmParseError):
        SlurmVersion.parse("no version here")


# ------------------------------------------------------------------ pure helpers


@pytest.mark.parametrize(
    ("text", "per", "want"),
    [
        ("gres:gpu:a100:2", "node", [GpuRequest(2, "node", "a100")]),
        ("gres/gpu:a100_80g:2", "node", [GpuRequest(2, "node", "a100_80g")]),
        ("gres/gpu:4", "job", [GpuRequest(4, "job", None)]),
        ("gpu:h100:8", "node", [GpuRequest(8, "node", "h100")]),
        ("gres/gpu", "node", [GpuRequest(1, "node", None)]),
        ("gres/gpu=3", "task", [GpuRequest(3, "task", None)]),
        ("gres:nic:1,gres:gpu:v100:4", "node", [GpuRequest(4, "node", "v100")]),
        ("", "node", []),
        ("gres:mps:100", "node", []),
    ],
)
def test_parse_gpu_spec(text: str, per: str, want: list[GpuRequest]) -> None:
    assert parse_gpu_spec(text, per) == want


def test_parse_tres_units() -> None:
    t = parse_tres("billing=8,cpu=2,mem=1G,gres/gpu:a100_80g=2,gres/gpu=2,node=1")
    assert t == {"billing": 8, "cpu": 2, "mem": 1024, "gres/gpu:a100_80g": 2, "gres/gpu": 2,
                 "node": 1}


def test_gpu_type_of_gres() -> None:
    assert gpu_type_of_gres("gpu:a100_80g:8(S:0-1)") == ("a100_80g", 8)
    assert gpu_type_of_gres("(null)") == (None, 0)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("7-00:00:00", 10080), ("01:00:00", 60), ("00:10:00", 10), ("45", 45),
     ("UNLIMITED", None), ("Partition_Limit", None), ("N/A", None), ("1-12", 2160)],
)
def test_timelimit(text: str, minutes: int | None) -> None:
    assert parse.parse_timelimit_min(text) == minutes


def test_oneliner_values_with_spaces() -> None:
    line = "NodeName=n1 State=IDLE+DRAIN Reason=slurm-ml: xid 79 gpu2 [root@t] X=1"
    f = parse.parse_oneliner(line)
    assert f["Reason"] == "slurm-ml: xid 79 gpu2 [root@t]" and f["X"] == "1"


def test_node_state_split() -> None:
    assert parse.split_node_state("IDLE+DRAIN") == ("IDLE", frozenset({"DRAIN"}))
    assert parse.split_node_state("DOWN*") == ("DOWN", frozenset({"NOT_RESPONDING"}))
    assert parse.split_node_state("DRAINED") == ("IDLE", frozenset({"DRAIN"}))


def test_bad_json_is_a_named_error() -> None:
    with pytest.raises(SlurmParseError, match="not JSON"):
        parse.parse_squeue_json("squeue: error: Unable to contact slurm controller")
    with pytest.raises(SlurmParseError, match="no 'jobs' list"):
        parse.parse_squeue_json("{}")
    with pytest.raises(SlurmParseError, match="fields"):
        parse.parse_sacct_usage("1|alice", 0, 1)


@given(st.text())
def test_oneliner_never_crashes(text: str) -> None:
    parse.parse_oneliner(text)


@given(st.text())
def test_gpu_spec_never_crashes(text: str) -> None:
    for r in parse_gpu_spec(text, "node"):
        assert r.count >= 0


# ------------------------------------------------------------------ 24.11
# Jobs in the 24.11 capture (jobids.txt): 2 --gres=gpu:a100_80g:2, 3 --gpus=3,
# 4 --gpus-per-node=1 -N2, 5 --gpus-per-task=1 -n2, 6 --requeue --time-min=10,
# 7 --constraint=a100_80g, 8 array, 9 --comment, 10 QOS free,
# 13 pending with SiteFactor=500, 14 held.


def test_squeue_json_2411_numbers_are_objects_and_states_lists() -> None:
    jobs = {j.job_id: j for j in parse.parse_squeue_json(read("24.11", "squeue.json"))}
    assert jobs[2].gpus == (GpuRequest(2, "node", "a100_80g"),)
    assert jobs[3].gpus == (GpuRequest(3, "job", None),)
    assert jobs[4].gpus == (GpuRequest(1, "node", None),) and jobs[4].num_nodes == 2
    assert jobs[5].gpus == (GpuRequest(1, "task", None),)  # 24.11 writes gres/gpu=1 here
    assert (jobs[6].time_limit_min, jobs[6].time_min_min) == (60, 10)
    assert jobs[7].features == "a100_80g"
    assert jobs[9].comment == "slurm-ml: eval sweep 7"
    assert jobs[10].qos == "free"
    assert jobs[2].state is JobState.RUNNING and jobs[14].state is JobState.PENDING
    assert jobs[2].user == "alice" and jobs[2].account == "llm-pretrain"
    assert jobs[2].priority == 13089 and jobs[14].priority == 0
    assert jobs[2].start_time is not None and jobs[2].submit_time is not None


def test_scontrol_jobs_2411_agree_with_squeue_json() -> None:
    one = {j.job_id: j for j in parse.parse_scontrol_jobs(read("24.11", "scontrol_show_job_o.txt"))}
    for j in parse.parse_squeue_json(read("24.11", "squeue.json")):
        o = one[j.job_id]
        assert (o.user, o.account, o.qos, o.state, o.gpus) == (j.user, j.account, j.qos,
                                                              j.state, j.gpus), j.job_id


def test_scontrol_nodes_2411_drain_with_planned_flag() -> None:
    text = read("24.11", "scontrol_show_node_o.txt")
    nodes = {n.name: n for n in parse.parse_scontrol_nodes(text)}
    assert set(nodes) == {"tnode1", "tnode2"}
    t2 = nodes["tnode2"]
    assert t2.drained and t2.state == "MIXED" and "PLANNED" in t2.flags
    assert t2.reason == "slurm-ml: nvlink gpu3 inactive"
    assert nodes["tnode1"].gpu_type == "a100_80g" and nodes["tnode1"].gpus_total == 8


def test_sacct_usage_2411() -> None:
    usage = {u.job_id: u for u in parse.parse_sacct_usage(
        read("24.11", "sacct_truncate_p_epoch.txt"), 0, 2**40)}
    assert usage[1].state is JobState.COMPLETED and usage[1].elapsed_s == 3
    assert usage[2].alloc_tres["gres/gpu:a100_80g"] == 2 and usage[2].alloc_tres["mem"] == 1000
    assert usage[3].gpus == 3


def test_sprio_site_2411() -> None:
    assert parse.parse_sprio_site(read("24.11", "sprio_site.txt")) == {13: 500}


def test_runaway_none_2411() -> None:
    assert parse.parse_runaway(read("24.11", "sacctmgr_runawayjobs_p.txt")) == []
    assert parse.parse_runaway(read("24.11", "sacctmgr_runawayjobs.txt")) == []


def test_sacct_submit_is_read_from_the_end_even_with_a_pipe_in_the_job_name() -> None:
    line = ("7|alice|detection|alloc|COMPLETED|60|gres/gpu:v100=1,gres/gpu=1|100|160|"
            "a|b|90")
    (u,) = parse.parse_sacct_usage(line, 0, 1000)
    assert (u.job_id, u.start, u.end, u.submit) == (7, 100, 160, 90)


# ------------------------------------------------- GPU counts, every scope, both versions
# The jobs of each kind in the captures (SOURCES.md): 22.05 11 --gres=gpu:a100_80g:2,
# 12 --gpus=3, 13 --gpus-per-node=1 -N2, 14 --gpus-per-task=1 -n2, 15 --gres=gpu:v100:4
# -N2, 16/19 pending --gres=gpu:8 -N2; 24.11 as listed above.

KINDS = {"22.05": {11: 2, 12: 3, 13: 2, 14: 2, 15: 8, 16: 16, 17: 1, 19: 16},
         "24.11": {2: 2, 3: 3, 4: 2, 5: 2, 13: 8, 15: 4}}


def _jobs(version: str, name: str) -> dict[int, Job]:
    text = read(version, name)
    jobs = (parse.parse_scontrol_jobs(text) if name.endswith(".txt")
            else parse.parse_squeue_json(text))
    return {j.job_id: j for j in jobs}


CAPTURES = [("22.05", "squeue.json"), ("22.05", "scontrol_show_job_o.txt"),
            ("24.11", "squeue.json"), ("24.11", "scontrol_show_job.json"),
            ("24.11", "scontrol_show_job_o.txt")]


@pytest.mark.parametrize(("version", "name"), CAPTURES)
def test_total_gpus_of_each_kind(version: str, name: str) -> None:
    jobs = _jobs(version, name)
    assert {jid: jobs[jid].total_gpus for jid in KINDS[version]} == KINDS[version]


@pytest.mark.parametrize(("version", "name", "job"), [
    ("22.05", "squeue.json", 14), ("22.05", "scontrol_show_job_o.txt", 14),
    ("24.11", "squeue.json", 5), ("24.11", "scontrol_show_job.json", 5),
    ("24.11", "scontrol_show_job_o.txt", 5)])
def test_per_task_job_reads_its_tasks_and_allocation(version: str, name: str,
                                                     job: int) -> None:
    """--gpus-per-task=1 -n2: 2 tasks on one node, AllocTRES gres/gpu=2 (was 1 GPU)."""
    j = _jobs(version, name)[job]
    assert j.gpus == (GpuRequest(1, "task", None),)
    assert (j.num_nodes, j.num_tasks, j.alloc_gpus, j.state) == (1, 2, 2, JobState.RUNNING)
    assert j.requested_gpus == 2 and j.total_gpus == 2
    assert j.sockets_per_node is None  # Socks/Node=*, sockets_per_node unset


@pytest.mark.parametrize(("version", "name"), CAPTURES)
def test_allocation_only_for_jobs_that_got_one(version: str, name: str) -> None:
    """Pending jobs have no allocation; 22.05's single TRES= is the request for a job that
    never got nodes (jobs 6-10 there were cancelled while pending)."""
    for j in _jobs(version, name).values():
        if j.state is JobState.PENDING or not j.nodes:
            assert j.alloc_gpus is None, j.job_id
        else:
            assert j.alloc_gpus == j.total_gpus and j.alloc_gpus is not None, j.job_id


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_requested_gpus_match_slurms_own_request_count(version: str) -> None:
    """What the request adds up to is what slurmctld put in tres_req_str, every job."""
    raw = json.loads(read(version, "squeue.json"))["jobs"]
    jobs = _jobs(version, "squeue.json")
    for r in raw:
        want = gpus_in_tres(r["tres_req_str"]) or 0
        assert jobs[r["job_id"]].requested_gpus == want, r["job_id"]


def test_gpus_in_tres() -> None:
    assert gpus_in_tres("cpu=2,mem=2000M,node=1,billing=2,gres/gpu=2,gres/gpu:a100_80g=2") == 2
    assert gpus_in_tres("cpu=1,gres/gpu:a100=1,gres/gpu:v100=2") == 3  # typed only
    assert gpus_in_tres("cpu=1,mem=1000M,node=1,billing=1") is None  # gres/gpu not tracked
    assert gpus_in_tres("") is None


def test_oneliner_per_socket_and_no_allocation_yet() -> None:
    line = ("JobId=7 JobName=s UserId=alice(2001) Account=a QOS=alloc JobState=PENDING "
            "Reason=Resources NodeList= NumNodes=2 NumTasks=2 Socks/Node=2 "
            "ReqTRES=cpu=2,node=2,gres/gpu=8 AllocTRES=(null) TresPerSocket=gres/gpu:2")
    (j,) = parse.parse_scontrol_jobs(line)
    assert (j.sockets_per_node, j.num_tasks, j.alloc_gpus) == (2, 2, None)
    assert j.total_gpus == 8  # 2 per socket x 2 sockets x 2 nodes


def test_json_per_socket_and_tasks_per_node() -> None:
    job = {"job_id": 9, "job_state": ["PENDING"], "node_count": {"set": True, "number": 2},
           "tasks": {"set": False, "number": 0},
           "tasks_per_node": {"set": True, "number": 4},
           "sockets_per_node": {"set": True, "infinite": False, "number": 2},
           "tres_per_socket": "gres/gpu:1", "tres_alloc_str": ""}
    j = parse.job_from_json(job)
    assert (j.num_tasks, j.sockets_per_node, j.alloc_gpus, j.total_gpus) == (8, 2, None, 4)
