"""Job.total_gpus on the real dev cluster: one 2-GPU job of each request scope, read back
through CliSlurm (squeue --json) and ``scontrol -o show job``, held and then running.

Per-task requests used to count one GPU (issue 16). Each job is pinned to its node count
so that admission keeps the scope as submitted (an unpinned ``--gpus-per-task`` job is
laid out per node); the 1-GPU-per-node gang opts out of whole-node shaping with
``allow_fragment``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from slurm_jobs import sbatch

from slurm_ml.model import GpuRequest, Job, JobState
from slurm_ml.slurm import parse
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.runner import SlurmRunner

pytestmark = pytest.mark.integration

#: label -> (sbatch arguments, the request as the parser must read it, nodes)
KINDS: dict[str, tuple[tuple[str, ...], tuple[GpuRequest, ...], int]] = {
    "per_task": (("--gpus-per-task=1", "-n2", "-N1"), (GpuRequest(1, "task"),), 1),
    "gres": (("--gres=gpu:2", "-N1"), (GpuRequest(2, "node"),), 1),
    "per_job": (("--gpus=2", "-N1"), (GpuRequest(2, "job"),), 1),
    "per_node": (("--gpus-per-node=1", "-N2", "--comment=allow_fragment"),
                 (GpuRequest(1, "node"),), 2),
    # sbatch refuses --gpus-per-socket without --sockets-per-node; the dev nodes have 64
    "per_socket": (("--gpus-per-socket=1", "--sockets-per-node=2", "-N1"),
                   (GpuRequest(1, "socket"),), 1),
}


@pytest.fixture
def slurm(slurm_conf: str) -> CliSlurm:
    return CliSlurm(SlurmRunner(env={"SLURM_CONF": slurm_conf}, timeout_s=30))


@pytest.fixture
def submitted(slurm: CliSlurm) -> Iterator[dict[str, int]]:
    """One held job of each kind as alice; all cancelled afterwards."""
    ids: list[int] = []
    try:
        got = {label: sbatch("alice", "--hold", "-t", "5", *args, "--wrap", "sleep 120",
                             jobs=ids)
               for label, (args, _req, _nodes) in KINDS.items()}
        yield got
    finally:
        if ids:
            slurm.cancel(ids)


def read_both(slurm: CliSlurm, ids: dict[str, int]) -> tuple[dict[str, Job], dict[str, Job]]:
    """The jobs as squeue --json (list_jobs) and as ``scontrol -o show job`` give them."""
    by_id = {j.job_id: j for j in slurm.list_jobs(job_ids=list(ids.values()))}
    one = {j.job_id: j for j in parse.parse_scontrol_jobs(
        slurm.run(["scontrol", "-o", "show", "job"]))}
    return ({label: by_id[jid] for label, jid in ids.items()},
            {label: one[jid] for label, jid in ids.items()})


def test_every_scope_counts_two_gpus_held_and_running(slurm: CliSlurm,
                                                      submitted: dict[str, int]) -> None:
    for source in read_both(slurm, submitted):
        for label, j in source.items():
            _args, req, nodes = KINDS[label]
            assert j.state is JobState.PENDING, (label, j)
            assert (j.gpus, j.num_nodes, j.alloc_gpus) == (req, nodes, None), (label, j)
            assert j.total_gpus == 2, (label, j)
        assert source["per_task"].num_tasks == 2
        assert source["per_socket"].sockets_per_node == 2

    slurm.release(list(submitted.values()))
    deadline = time.monotonic() + 90
    while True:
        squeue, scontrol = read_both(slurm, submitted)
        if all(j.state is JobState.RUNNING for j in (*squeue.values(), *scontrol.values())):
            break
        if time.monotonic() > deadline:
            pytest.fail(f"not all running after 90 s: "
                        f"{ {k: (j.state, j.reason) for k, j in squeue.items()} }")
        time.sleep(1)

    for source in (squeue, scontrol):
        for label, j in source.items():
            assert (j.alloc_gpus, j.total_gpus, j.requested_gpus) == (2, 2, 2), (label, j)
            assert j.num_nodes == KINDS[label][2], (label, j)
