"""Job.total_gpus in every GPU scope, and the numbers the daemon's consumers get from it.

Per-task and per-socket requests used to count once (``--gpus-per-task=1 -n2`` was one
GPU), so billing, free GPUs, victim sizes, demand and zombie sample coverage were all
undercounted (issue 16).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from daemon_helpers import CFG, NOW, nodes

from slurm_ml.daemon import views
from slurm_ml.model import GpuRequest, Job, JobState


def job(*gpus: GpuRequest, num_nodes: int = 1, tasks: int | None = None,
        sockets: int | None = None, alloc: int | None = None,
        state: JobState = JobState.PENDING, node_list: str = "") -> Job:
    return Job(job_id=5, name="gpt1-n2", user="alice", account="llm-pretrain",
               partition="gpu", qos="alloc", state=state,
               reason="Resources" if state is JobState.PENDING else "None", nodes=node_list,
               num_nodes=num_nodes, gpus=gpus, time_limit_min=60, time_min_min=None,
               requeue=True, site_factor=0, priority=1000, submit_time=NOW - 600,
               start_time=None if state is JobState.PENDING else NOW - 300,
               num_tasks=tasks, sockets_per_node=sockets, alloc_gpus=alloc)


# ---------------------------------------------------------------- the model, per scope


@pytest.mark.parametrize(("gpus", "num_nodes", "tasks", "sockets", "want"), [
    # --gpus-per-task=1 -n2 (the 24.11 capture's job 5)
    ((GpuRequest(1, "task"),), 1, 2, None, 2),
    # --gpus-per-task=2 -n4 -N2
    ((GpuRequest(2, "task"),), 2, 4, None, 8),
    # --gpus-per-task=1 -N2 without -n: one task per node
    ((GpuRequest(1, "task"),), 2, None, None, 2),
    # --gpus-per-socket=2 --sockets-per-node=2 -N3
    ((GpuRequest(2, "socket"),), 3, None, 2, 12),
    # --gpus-per-socket=1 with sockets unknown: one socket per node, a lower bound
    ((GpuRequest(1, "socket"),), 2, None, None, 2),
    # --gpus-per-node=4 -N2 and --gres=gpu:v100:4 -N2
    ((GpuRequest(4, "node"),), 2, 2, None, 8),
    ((GpuRequest(4, "node", "v100"),), 2, None, None, 8),
    # --gpus=3 -N2: per job, however many nodes
    ((GpuRequest(3, "job"),), 2, 2, None, 3),
    # -N1 --gpus-per-node=8 --gpus-per-task=1 -n8: one record, per node decides (8, not 16)
    ((GpuRequest(8, "node"), GpuRequest(1, "task")), 1, 8, None, 8),
    # --gpus=4 --gpus-per-task=1 -n4: per job decides
    ((GpuRequest(4, "job"), GpuRequest(1, "task")), 1, 4, None, 4),
    # two GPU types are two records and add up
    ((GpuRequest(1, "node", "a100_80g"), GpuRequest(2, "task", "v100")), 1, 2, None, 5),
    ((), 1, 1, None, 0),
])
def test_requested_gpus_per_scope(gpus: tuple[GpuRequest, ...], num_nodes: int,
                                  tasks: int | None, sockets: int | None, want: int) -> None:
    j = job(*gpus, num_nodes=num_nodes, tasks=tasks, sockets=sockets)
    assert j.requested_gpus == want
    assert j.total_gpus == want  # pending: no allocation yet


def test_the_allocation_is_the_truth_once_the_job_runs() -> None:
    """A running job counts what slurmctld allocated (AllocTRES gres/gpu), whatever the
    request adds up to: e.g. a task count slurmctld resolved differently."""
    j = job(GpuRequest(1, "task"), tasks=None, alloc=2, state=JobState.RUNNING,
            node_list="gpu05")
    assert (j.requested_gpus, j.total_gpus) == (1, 2)
    assert replace(j, alloc_gpus=None).total_gpus == 1


def test_defaults_keep_old_constructors_working() -> None:
    j = Job(job_id=1, name="n", user="u", account="a", partition="gpu", qos="alloc",
            state=JobState.PENDING, reason="Priority", nodes="", num_nodes=2,
            gpus=(GpuRequest(4, "node"),), time_limit_min=None, time_min_min=None,
            requeue=True, site_factor=None, priority=None, submit_time=None, start_time=None)
    assert (j.num_tasks, j.sockets_per_node, j.alloc_gpus, j.total_gpus) == (None, None,
                                                                            None, 8)


# ------------------------------------------------------- the daemon's consumers of it

PER_TASK_RUNNING = job(GpuRequest(1, "task"), tasks=2, alloc=2, state=JobState.RUNNING,
                       node_list="gpu05")
PER_TASK_PENDING = job(GpuRequest(1, "task", "a100_80g"), tasks=2)


def test_billing_counts_every_gpu_of_a_per_task_job() -> None:
    assert views.job_billing_gpus(CFG, PER_TASK_RUNNING, "v100") == pytest.approx(
        2 * CFG.gpu_types["v100"].billing_weight)


def test_a_running_per_task_job_holds_two_gpus() -> None:
    """RunningJob.gpus is the victim size contracts requeue and the GPU count the zombie
    check wants samples from (a verdict on one of two GPUs sampled was the bug)."""
    (r,) = views.running_jobs(CFG, [PER_TASK_RUNNING])
    assert (r.gpus, r.gpu_type, r.nodes) == (2, "v100", ("gpu05",))
    assert r.billing_gpus == pytest.approx(2 * CFG.gpu_types["v100"].billing_weight)


def test_free_gpus_subtract_both_gpus_of_a_per_task_job() -> None:
    running = views.running_jobs(CFG, [PER_TASK_RUNNING])
    free = views.free_gpus(CFG, nodes(), running)
    assert free["v100"] == 2 * 4 - 2  # gpu05 and gpu06 hold 4 each


def test_demand_counts_every_gpu_of_a_pending_per_task_job() -> None:
    (w,) = views.waiting_jobs(CFG, [PER_TASK_PENDING])
    assert (w.gpus, w.gpu_types) == (2, frozenset({"a100_80g"}))
    assert w.billing_gpus == pytest.approx(2 * CFG.gpu_types["a100_80g"].billing_weight)
    (fp,) = views.footprints(CFG, [PER_TASK_PENDING], [])
    assert fp.billing_gpus == pytest.approx(w.billing_gpus)


def test_per_socket_demand() -> None:
    j = job(GpuRequest(2, "socket", "a100_80g"), num_nodes=2, sockets=2)
    (w,) = views.waiting_jobs(CFG, [j])
    assert w.gpus == 8
