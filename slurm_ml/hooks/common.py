"""Small helpers the hook runners share: a node's expectations, the jobs on a node."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from slurm_ml.config import Config
from slurm_ml.health.checks import Expectations, Thresholds, expectations_for
from slurm_ml.model import Job, JobState, NodeClass
from slurm_ml.slurm.protocol import SlurmClient

__all__ = ["ACTIVE", "DEFAULT_THRESHOLDS", "jobs_on_node", "node_expectations", "runs_on"]

#: The checks' default thresholds (a module-level value: defaults must not be calls).
DEFAULT_THRESHOLDS = Thresholds()
#: Job states that hold a node's resources.
ACTIVE: frozenset[JobState] = frozenset({JobState.RUNNING, JobState.SUSPENDED,
                                         JobState.COMPLETING})


def node_expectations(cfg: Config, node: str) -> tuple[NodeClass, Expectations] | None:
    """The node's class and what a healthy node of it looks like; None if unmanaged."""
    node_class = cfg.node_class_of(node)
    if node_class is None:
        return None
    return node_class, expectations_for(node_class, cfg.gpu_types[node_class.gpu_type])


def runs_on(job: Job, node: str) -> bool:
    """``job.nodes`` ("gpu[01-02]", "gpu03") includes ``node``."""
    if not job.nodes:
        return False
    try:
        return node in NodeSet(job.nodes, resolver=RESOLVER_NOGROUP)
    except NodeSetException:
        return node in job.nodes.split(",")


def jobs_on_node(slurm: SlurmClient, node: str, *, users: Collection[str] | None = None,
                 exclude: Iterable[int] = ()) -> list[Job]:
    """Jobs holding resources on ``node`` (SlurmError propagates)."""
    skip = set(exclude)
    return [j for j in slurm.list_jobs(states=ACTIVE, users=users)
            if j.job_id not in skip and runs_on(j, node)]
