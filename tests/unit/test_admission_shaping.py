"""Shaping real sbatch lines (issue 14): GPUs counted as Slurm counts them, what the user
pinned kept, CPUs and memory per node respected.

Each case is an sbatch command line, turned into job_desc fields by submit-check's own
parser (``sbatch_args.parse_sbatch``, the fields the shim would send), then through
``wire.to_request`` → ``admission.decide`` → ``wire.reply_for``, on the example config
(A100 nodes: 8 GPUs, 64 CPUs, 512000 MB; V100 nodes: 4 GPUs, 32 CPUs, 256000 MB).
"""

from __future__ import annotations

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
