"""Shaping real sbatch lines (issue 14): GPUs counted as Slurm counts them, what the user
pinned kept, CPUs and memory per node respected.

Each case is an sbatch command line, turned into job_desc fields by submit-check's own
parser (``sbatch_args.parse_sbatch``, the fields the shim would send), then through
``wire.to_request`` → ``admission.decide`` → ``wire.reply_for``, on the example config
(A100 nodes: 8 GPUs, 64 CPUs, 512000 MB; V100 nodes: 4 GPUs, 32 CPUs, 256000 MB).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from jobdesc_helpers import applied, total_gpus

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.model import GpuRequest
from slurm_ml.policy.admission import decide
from slurm_ml.policy.admission_state import AccountStanding, AdmissionState
from slurm_ml.policy.cluster_view import cluster_view
from slurm_ml.policy.request import JobRequest
from slurm_ml.submitd.sbatch_args import parse_sbatch
from slurm_ml.submitd.wire import normalize, reply_for, to_request

CFG = load_config(DEFAULT_CONFIG)
VIEW = cluster_view(CFG)
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
STATE = AdmissionState(
    standing={"llm-pretrain": AccountStanding("llm-pretrain", exhausted=False, site_factor=700,
                                              usage_gpu_hours=1.0, budget_gpu_hours=5000.0)},
    profiles_gb={}, loaded_at=NOW)


def fields(argv: list[str], user: str = "bob") -> dict[str, Any]:
    """The job_desc fields sbatch (and the shim) would hand admission for ``argv``."""
    (job,) = parse_sbatch([*argv, "--wrap", "srun train.py"], user=user)
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
     ["-N4", "--gres=gpu:4", "--ntasks-per-node=1"], ["16 GPUs on 4 nodes", "--nodes=2"]),
    ("node-count-kept-N2-gpu2", ["-N", "2", "--gpus-per-node=2"],
     ["2 nodes with 2 GPUs each", "--nodes=1 (2 GPUs)"]),
    ("node-count-kept-N4-gpu1", ["-N4", "--ntasks=4", "--gpus-per-task=1"],
     ["4 nodes with 1 GPU each", "allow_fragment"]),
    ("ntasks-per-node-kept", ["--ntasks=4", "--ntasks-per-node=2", "--gpus-per-task=1"],
     ["2 nodes with 2 GPUs each", "allow_fragment"]),
    ("explicit-N3-never-dropped", ["--gpus=v100:4", "--ntasks-per-node=4", "-N", "3"],
     ["4 GPUs on 3 nodes", "--nodes=1"]),
    ("nodes-beyond-the-pool", ["-N4", "--gpus-per-node=8", "--ntasks-per-node=8"],
     ["32 GPUs on 4 nodes", "at most 2 nodes", "--nodes=2 (16 GPUs)"]),
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
