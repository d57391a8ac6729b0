"""Shaping real sbatch lines (issue 14): GPUs counted as Slurm counts them, what the user
pinned kept, CPUs and memory per node respected.

Each case is an sbatch command line, turned into job_desc fields by submit-check's own
parser (``sbatch_args.parse_sbatch``, the fields the shim would send), then through
``wire.to_request`` → ``admission.decide`` → ``wire.reply_for``, on the example config
(A100 nodes: 8 GPUs, 64 CPUs, 512000 MB; V100 nodes: 4 GPUs, 32 CPUs, 256000 MB).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from jobdesc_helpers import applied, total_gpus

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.model import GpuRequest
from slurm_ml.policy.admission import decide
from slurm_ml.policy.admission.cluster_view import cluster_view
from slurm_ml.policy.admission.request import JobRequest
from slurm_ml.policy.admission.state import AccountStanding, AdmissionState
from slurm_ml.submitd.sbatch_args import parse_sbatch, per_node_gpu_options
from slurm_ml.submitd.wire import GPU_OPTION, normalize, reply_for, to_request

CFG = load_config(DEFAULT_CONFIG)
VIEW = cluster_view(CFG)
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
STATE = AdmissionState(
    standing={"llm-pretrain": AccountStanding("llm-pretrain", exhausted=False, site_factor=700,
                                              usage_gpu_hours=1.0, budget_gpu_hours=5000.0)},
    profiles_gb={}, loaded_at=NOW)


def fields(argv: list[str], user: str = "bob") -> dict[str, Any]:
    """The job_desc fields sbatch (and the shim) would hand admission for ``argv``, with
    the option its GPUs per node were given in, as ``submit-check`` adds it."""
    line = [*argv, "--wrap", "srun train.py"]
    (job,) = parse_sbatch(line, user=user)
    (option,) = per_node_gpu_options(line, user=user)
    if option is not None:
        job[GPU_OPTION] = option
    return job


def submit(argv: list[str], user: str = "bob") -> tuple[dict[str, Any], dict[str, Any]]:
    """(reply, job as rewritten) for one sbatch line."""
    job = normalize(fields(argv, user))
    req = to_request(job)
    decision = decide(req, CFG, VIEW, STATE, NOW)
    reply = reply_for(decision, job, req, leaf_wait_s=600)
    return reply, applied(job, reply)


# --------------------------------------------------------------------------- GPU counting

@pytest.mark.parametrize(("gpus", "nodes", "tasks", "total"), [
    # one record: per job wins, then per node x nodes, then per task x tasks
    ((GpuRequest(8, "node"), GpuRequest(1, "task")), 1, 8, 8),
    ((GpuRequest(8, "node"), GpuRequest(1, "task")), 16, 128, 128),
    ((GpuRequest(8, "job"), GpuRequest(8, "task")), None, 1, 8),
    ((GpuRequest(16, "job"), GpuRequest(8, "node")), 2, None, 16),
    ((GpuRequest(1, "task"),), None, 12, 12),
    ((GpuRequest(4, "node"),), 3, None, 12),
    ((GpuRequest(2, "socket"),), 2, None, None),
    ((GpuRequest(8, "job"), GpuRequest(2, "socket")), 1, None, 8),
    # different types are different records
    ((GpuRequest(2, "node", "a100_80g"), GpuRequest(1, "node", "v100")), 2, None, 6),
])
def test_total_gpus_counts_as_slurm_does(gpus: tuple[GpuRequest, ...], nodes: int | None,
                                         tasks: int | None, total: int | None) -> None:
    req = JobRequest(user="bob", gpus=gpus, min_nodes=nodes, num_tasks=tasks)
    assert req.total_gpus() == total


def test_gpus_per_node_with_gpus_per_task_is_not_counted_twice() -> None:
    # a common launcher header: one node, 8 tasks, 8 GPUs, one per task
    reply, after = submit(["-N1", "--ntasks-per-node=8", "--gpus-per-node=8",
                           "--gpus-per-task=1"])
    assert reply["action"] == "accept", reply
    assert not {"min_nodes", "max_nodes", "tres_per_node", "tres_per_task", "shared",
                "ntasks_per_node"} & set(reply["set"]), reply
    assert "2 nodes" not in reply["message"]
    assert total_gpus(after) == 8


def test_sixteen_node_launcher_is_counted_as_128_gpus() -> None:
    reply, _ = submit(["-N16", "--ntasks-per-node=8", "--gpus-per-node=8",
                       "--gpus-per-task=1"])
    assert reply["action"] == "reject"
    assert "128 GPUs" in reply["message"] and "256" not in reply["message"]


def test_gpus_with_gpus_per_task_is_eight() -> None:
    reply, after = submit(["--gpus", "8", "--gpus-per-task", "8", "--ntasks", "1"])
    assert reply["action"] == "accept", reply
    assert total_gpus(after) == 8
    assert after.get("min_nodes", 1) == 1 and after.get("max_nodes", 1) == 1
    assert "16" not in reply["message"]


# --------------------------------------------------------------------------- what is pinned

_ADVICE = re.compile(r"Nearest valid requests: (?P<list>.*?)\.(?: |$)")


def advised(message: str) -> list[list[str]]:
    """The fixes a rejection names, each as the sbatch flags to add."""
    out = []
    m = _ADVICE.search(message)
    if m:
        for item in m["list"].split("; "):
            out.append(re.sub(r" \(\d+ GPUs?\)$", "", item).split())
    if "add allow_fragment to --comment" in message:
        out.append(["--comment=allow_fragment"])
    return out


def assert_advice_is_accepted(argv: list[str], message: str) -> None:
    fixes = advised(message)
    assert fixes, message
    for flags in fixes:
        reply, _ = submit([*argv, *flags])
        assert reply["action"] == "accept", (flags, reply["message"])


#: sbatch lines whose node count, tasks per node or GPUs per node/task strand GPUs on
#: every node class: rejected (never packed onto fewer nodes), with advice that works
PINNED_REJECTS: list[tuple[str, list[str], list[str]]] = [
    ("launcher-per-node-kept",  # one accelerate/torchrun launcher per node
     ["-N4", "--gres=gpu:4", "--ntasks-per-node=1"],
     ["4 nodes with 4 GPUs each", "--nodes=2 --gres=gpu:8 --ntasks=2 (16 GPUs)"]),
    ("node-count-kept-N2-gpu2", ["-N", "2", "--gpus-per-node=2"],
     ["2 nodes with 2 GPUs each", "--nodes=1 --gpus-per-node=4 (4 GPUs)"]),
    ("node-count-kept-N4-gpu1", ["-N4", "--ntasks=4", "--gpus-per-task=1"],
     ["4 nodes with 1 GPU each", "allow_fragment"]),
    ("ntasks-per-node-kept", ["--ntasks=4", "--ntasks-per-node=2", "--gpus-per-task=1"],
     ["2 nodes with 2 GPUs each", "allow_fragment"]),
    ("explicit-N3-never-dropped", ["--gpus=v100:4", "--ntasks-per-node=4", "-N", "3"],
     ["4 GPUs on 3 nodes", "--nodes=1"]),
    ("nodes-beyond-the-pool", ["-N4", "--gpus-per-node=8", "--ntasks-per-node=8"],
     ["32 GPUs on 4 nodes", "at most 2 nodes", "--nodes=2 --ntasks=16 (16 GPUs)"]),
    ("sixteen-nodes-of-four", ["-N16", "--gres=gpu:4", "--ntasks-per-node=1"],
     ["64 GPUs on 16 nodes", "--nodes=2"]),
]


@pytest.mark.parametrize(("argv", "says"), [c[1:] for c in PINNED_REJECTS],
                         ids=[c[0] for c in PINNED_REJECTS])
def test_pinned_shape_is_kept_or_rejected_with_working_advice(argv: list[str],
                                                              says: list[str]) -> None:
    reply, _ = submit(argv)
    assert reply["action"] == "reject", reply
    for text in says:
        assert text in reply["message"], reply["message"]
    assert "--gpus=" not in reply["message"]  # advice in the script's own flags
    assert "NVLink" not in reply["message"]
    assert_advice_is_accepted(argv, reply["message"])


def test_pinned_node_count_is_steered_to_the_class_it_fills() -> None:
    reply, after = submit(["-N2", "--gpus-per-node=4", "--ntasks-per-node=1"])
    assert reply["action"] == "accept", reply
    assert (after["min_nodes"], after["max_nodes"], after["ntasks_per_node"]) == (2, 2, 1)
    assert after["features"] == "v100" and total_gpus(after) == 8


def test_node_range_is_narrowed_with_a_message() -> None:
    reply, after = submit(["-N", "2-4", "--gpus-per-node=8"])
    assert reply["action"] == "accept", reply
    assert (after["min_nodes"], after["max_nodes"]) == (2, 2)
    assert "Node range 2-4 narrowed to 2" in reply["message"]


def test_node_range_is_kept_on_the_class_that_holds_all_of_it() -> None:
    reply, after = submit(["-N", "1-2", "--ntasks-per-node=1", "--gpus-per-node=4"])
    assert reply["action"] == "accept", reply
    assert (after["min_nodes"], after["max_nodes"]) == (1, 2)
    assert after["features"] == "v100"
    assert "narrowed" not in reply["message"]


def test_one_node_note_promises_nvlink_only_where_there_is_some() -> None:
    reply, _ = submit(["--gpus=v100:4", "--ntasks=4"], user="dave")
    assert reply["action"] == "accept", reply
    assert "Kept on one node" in reply["message"] and "NVLink" not in reply["message"]
    reply, _ = submit(["--gpus=a100_80g:4", "--ntasks=4"])
    assert "share NVLink" in reply["message"]


@pytest.mark.parametrize("argv", [["--gpus=12"], ["--ntasks=12", "--gpus-per-task=1"],
                                  ["-N2", "--gpus-per-node=6"]])
def test_stranding_advice_is_accepted(argv: list[str]) -> None:
    reply, _ = submit(argv)
    assert reply["action"] == "reject"
    assert_advice_is_accepted(argv, reply["message"])


# --------------------------------------------------------------------------- CPUs and memory

NODE_CLASSES = {c.gpu_type: c for c in CFG.node_classes}


def per_node_needs(after: dict[str, Any]) -> tuple[int, int, int]:
    """(GPUs, CPUs, MB) one node of the rewritten job needs, read off its fields."""
    nodes = int(after.get("min_nodes") or 1)
    gpus = math.ceil((total_gpus(after) or 0) / nodes)
    tasks = after.get("ntasks_per_node") or math.ceil((after.get("num_tasks") or nodes) / nodes)
    cpus = tasks * (after.get("cpus_per_task") or 1)
    per_gpu = re.search(r"gpu:(\d+)$", str(after.get("cpus_per_tres") or ""))
    if per_gpu:
        cpus = max(cpus, gpus * int(per_gpu[1]))
    mem = after.get("min_mem_per_node") or 0
    if after.get("min_mem_per_cpu"):
        mem = max(mem, cpus * after["min_mem_per_cpu"])
    mem_gpu = re.search(r"gpu:(\d+)$", str(after.get("mem_per_tres") or ""))
    if mem_gpu:
        mem = max(mem, gpus * int(mem_gpu[1]))
    return gpus, cpus, mem


def fits_somewhere(after: dict[str, Any]) -> bool:
    gpus, cpus, mem = per_node_needs(after)
    nodes = int(after.get("min_nodes") or 1)
    feats = str(after.get("features") or "")
    fragment = "allow_fragment" in str(after.get("comment") or "")
    for gtype, cls in NODE_CLASSES.items():
        if feats and gtype not in feats and not set(cls.features) & set(re.split(r"\W+", feats)):
            continue
        if (cls.gpus_per_node >= gpus and (nodes == 1 or fragment or cls.gpus_per_node == gpus)
                and cls.cpus >= cpus and cls.memory_mb >= mem):
            return True
    return False


#: issue 14's table, CPU and memory rows: (id, sbatch line, message must say)
CPU_MEM_REJECTS: list[tuple[str, list[str], list[str]]] = [
    ("cpus-per-gpu-16-gpus-16", ["--cpus-per-gpu=16", "--gpus=16"],
     ["128 CPUs per node", "--cpus-per-gpu=8 (16 GPUs)"]),
    ("gpus2-ntasks2-cpus48", ["--gpus=2", "--ntasks=2", "--cpus-per-task=48"],
     ["96 CPUs per node", "--cpus-per-task=32 (2 GPUs)"]),
    ("mem-per-gpu-100G-gpus16", ["--mem-per-gpu=100G", "--gpus=16"],
     ["800 GB of memory per node", "--mem-per-gpu=62G (16 GPUs)"]),
    ("N2-gpus-per-node-2-mem-400G", ["-N", "2", "--gpus-per-node=2", "--mem=400G"],
     ["2 nodes with 2 GPUs each", "--nodes=1"]),
    # classes of real scripts: one launcher with more CPUs than any node has
    ("one-task-160-cpus", ["--gres=gpu:4", "--ntasks=1", "--cpus-per-task=160"],
     ["160 CPUs", "--cpus-per-task=64"]),
    ("launcher-per-node-160-cpus", ["-N4", "--gres=gpu:4", "--ntasks-per-node=1",
                                    "--cpus-per-task=160"],
     ["4 nodes", "--nodes=2 --gres=gpu:8 --ntasks=2 --cpus-per-task=64 (16 GPUs)"]),
    ("v100-torchrun-40-cpus", ["-N2", "--gres=gpu:4", "--ntasks-per-node=1",
                               "--cpus-per-task=40"],
     ["40 CPUs it needs per node", "--cpus-per-task=32 (8 GPUs)"]),
    ("ntasks-per-gpu-32-cpus", ["-N1", "--gpus-per-node=4", "--ntasks-per-gpu=1",
                                "--cpus-per-task=32"],
     ["128 CPUs per node", "--cpus-per-task=16 (4 GPUs)"]),
    ("gpus-with-per-task-80-cpus", ["--gpus", "8", "--gpus-per-task", "8", "--ntasks", "1",
                                    "--cpus-per-task=80", "--mem=475000"],
     ["80 CPUs", "--cpus-per-task=64 (8 GPUs)"]),
    ("four-nodes-of-one-8-gpu-task", ["-N4", "--ntasks=4", "--gpus-per-task=8",
                                      "--cpus-per-task=96"],
     ["32 GPUs on 4 nodes", "--nodes=2 --ntasks=2 --cpus-per-task=64 (16 GPUs)"]),
]


@pytest.mark.parametrize(("argv", "says"), [c[1:] for c in CPU_MEM_REJECTS],
                         ids=[c[0] for c in CPU_MEM_REJECTS])
def test_no_layout_needs_more_cpus_or_memory_than_a_node_has(argv: list[str],
                                                             says: list[str]) -> None:
    reply, _ = submit(argv)
    assert reply["action"] == "reject", reply
    for text in says:
        assert text in reply["message"], reply["message"]
    assert_advice_is_accepted(argv, reply["message"])
    for flags in advised(reply["message"]):
        _reply, after = submit([*argv, *flags])
        assert fits_somewhere(after), (flags, after)


#: jobs that fit as they are: accepted, and the rewrite still fits a node class
CPU_MEM_ACCEPTS: list[tuple[str, list[str]]] = [
    ("one-node-8-gpus-24-cpus", ["--gpus=8", "--ntasks=1", "--cpus-per-task=24"]),
    ("two-nodes-8x8-7-cpus-60G-per-gpu", ["-N2", "--gpus-per-node=8", "--ntasks-per-node=8",
                                          "--cpus-per-task=7", "--mem-per-gpu=60G"]),
    ("range-1-2-of-4-gpus-100G", ["-N", "1-2", "--ntasks-per-node=1", "--gpus-per-node=4",
                                  "--cpus-per-gpu=1", "--mem=100G"]),
    ("gpus16-cpus-per-gpu-8", ["--cpus-per-gpu=8", "--gpus=16"]),
    ("one-v100-10-cpus-64G", ["--gres=gpu:v100:1", "-c", "10", "--mem=64G"]),
    ("whole-node-memory", ["-N2", "--gpus-per-node=8", "--mem=0", "--exclusive"]),
    ("two-tasks-share-one-gpu", ["--ntasks=2", "--gres=gpu:1", "-c", "4", "--mem=18G"]),
]


@pytest.mark.parametrize("argv", [c[1] for c in CPU_MEM_ACCEPTS],
                         ids=[c[0] for c in CPU_MEM_ACCEPTS])
def test_jobs_that_fit_are_accepted_and_still_fit(argv: list[str]) -> None:
    reply, after = submit(argv)
    assert reply["action"] == "accept", reply
    assert fits_somewhere(after), after



# --------------------------------------------------------------------------- the fields

NO_VAL64 = 2**64 - 2
MEM_PER_CPU = 2**63


@pytest.mark.parametrize(("job", "attrs"), [
    # 22.05 spellings, as sbatch_args writes them
    ({"cpus_per_task": 8, "cpus_per_tres": "gres:gpu:4", "mem_per_tres": "gres:gpu:102400",
      "min_mem_per_node": 4096, "pn_min_cpus": 16, "min_cpus": 64, "ntasks_per_tres": 1},
     {"cpus_per_task": 8, "cpus_per_gpu": 4, "mem_per_gpu_mb": 102400,
      "mem_per_node_mb": 4096, "pn_min_cpus": 16, "min_cpus": 64, "ntasks_per_gpu": 1}),
    # 23.11+ spell GRES with "gres/"
    ({"cpus_per_tres": "gres/gpu:16", "mem_per_tres": "gres/gpu:2048"},
     {"cpus_per_gpu": 16, "mem_per_gpu_mb": 2048}),
    ({"min_mem_per_cpu": 2000}, {"mem_per_cpu_mb": 2000, "mem_per_node_mb": None}),
    ({"min_mem_per_node": 0}, {"mem_per_node_mb": 0}),  # --mem=0: all of each node's memory
    # what Lua makes of NO_VAL64 (and of NO_VAL64 less its MEM_PER_CPU bit): no value
    ({"min_mem_per_node": float(NO_VAL64), "min_mem_per_cpu": float(NO_VAL64 - MEM_PER_CPU),
      "cpus_per_task": 65534},
     {"mem_per_node_mb": None, "mem_per_cpu_mb": None, "cpus_per_task": None}),
])
def test_cpu_and_memory_fields_decode(job: dict[str, Any], attrs: dict[str, Any]) -> None:
    req = to_request({"user_name": "bob", "tres_per_job": "gres:gpu:2", **job})
    for key, value in attrs.items():
        assert getattr(req, key) == value, key


def test_sbatch_memory_sizes_are_checked() -> None:
    from slurm_ml.submitd.sbatch_args import SbatchParseError
    with pytest.raises(SbatchParseError, match="invalid memory"):
        fields(["--gpus=1", "--mem=lots"])
    assert fields(["--gpus=1", "--mem-per-gpu=1T"])["mem_per_tres"] == "gres:gpu:1048576"


def test_exclusive_is_forwarded_and_kept() -> None:
    job = fields(["-N2", "--gpus-per-node=8", "--exclusive"])
    assert to_request(job).exclusive is True


def test_a_range_is_never_narrowed_below_what_its_tasks_need() -> None:
    # 2 tasks at one per node need both nodes of -N 1-2; one GPU per node strands GPUs
    reply, after = submit(["-N", "1-2", "--gpus-per-node=1", "--ntasks=2",
                           "--ntasks-per-node=1"])
    if reply["action"] == "accept":
        assert after.get("max_nodes", 2) * after.get("ntasks_per_node", 1) >= 2, after
    else:
        assert_advice_is_accepted(["-N", "1-2", "--gpus-per-node=1", "--ntasks=2",
                                   "--ntasks-per-node=1"], reply["message"])


#: more classes of real scripts, as an admin would want them on this cluster
@pytest.mark.parametrize(("argv", "want"), [
    # one exclusive 8-GPU node, one launcher: kept as it is
    (["--nodes=1", "--exclusive", "--gpus-per-node=8", "--ntasks-per-node=1"], {}),
    # 2 exclusive nodes x 8 GPUs, one 60-CPU torchrun per node: kept, on whole nodes
    (["-N2", "--ntasks-per-node=1", "--gpus-per-node=8", "-c", "60", "--exclusive"],
     {"min_nodes": 2, "max_nodes": 2, "ntasks_per_node": 1, "tres_per_node": "gres:gpu:8"}),
    # two tasks sharing one GPU, 4 CPUs each
    (["--ntasks=2", "--gres=gpu:1", "-c", "4", "--mem=18G"], {}),
])
def test_real_script_shapes_that_fit_are_kept(argv: list[str], want: dict[str, Any]) -> None:
    reply, after = submit(argv)
    assert reply["action"] == "accept", reply
    assert {k: after.get(k) for k in want} == want
    assert not {"min_nodes", "max_nodes", "ntasks_per_node"} & set(reply["set"]) or want
    assert fits_somewhere(after)


def test_torchrun_per_node_on_three_nodes_is_refused_with_a_two_node_fix() -> None:
    argv = ["-N", "3", "--ntasks=3", "--gpus-per-node=4", "--cpus-per-gpu=4"]
    reply, _ = submit(argv)
    assert reply["action"] == "reject"
    assert "--nodes=2 --ntasks=2 (8 GPUs)" in reply["message"]
    _, after = submit([*argv, "--nodes=2", "--ntasks=2"])
    assert after["features"] == "v100" and (after["min_nodes"], after["max_nodes"]) == (2, 2)
