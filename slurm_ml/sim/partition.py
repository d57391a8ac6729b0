"""Philly's virtual clusters as hard partitions: each team runs only on its own nodes.

Philly gave every VC a node quota (HeliosArtifact's ``philly_vc.csv`` sizes); the
published Philly queue waits were measured on that partitioned cluster, not on one
shared pool. Calibration therefore replays the trace both ways. A partition is modelled
with what the engine already honours, a GPU type: team ``T``'s nodes carry type
``vc_T`` and its jobs ask for exactly that type (a Slurm site would use one partition
or one node feature per VC; placement is the same).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from slurm_ml.config import Config, revise
from slurm_ml.model import GpuType, NodeClass
from slurm_ml.sim.traces import DEFAULT_GPUS_PER_NODE, Trace

PREFIX = "vc_"


def partition_type(team: str) -> str:
    """The GPU type that stands for ``team``'s partition."""
    return f"{PREFIX}{team}"


def partition_by_team(
    cfg: Config, trace: Trace, team_nodes: Mapping[str, int], *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
) -> tuple[Config, Trace]:
    """``cfg``'s cluster replaced by one block of ``team_nodes[team]`` nodes per team
    (same GPUs per node, billing weight and features as ``cfg``'s first GPU type), and
    ``trace`` with every job pinned to its team's block. Jobs of teams without a node
    count are dropped (the description says how many): they had no quota to run in."""
    if not team_nodes:
        raise ValueError("no team node counts to partition by")
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be >= 1")
    base_type = next(iter(cfg.gpu_types.values()))
    template = next((nc for nc in cfg.node_classes if nc.gpu_type == base_type.name), None)
    total = sum(team_nodes.values())
    width = len(str(total))
    gpu_types: dict[str, GpuType] = {}
    classes: list[NodeClass] = []
    first = 1
    for team, nodes in sorted(team_nodes.items()):
        if nodes < 1:
            raise ValueError(f"team {team!r}: {nodes} nodes")
        name = partition_type(team)
        gpu_types[name] = dataclasses.replace(base_type, name=name, feature=name)
        last = first + nodes - 1
        classes.append(NodeClass(
            name=name,
            nodes=f"sim[{first:0{width}d}-{last:0{width}d}]" if last > first
            else f"sim{first:0{width}d}",
            gpu_type=name, gpus_per_node=gpus_per_node, leaf_switch=f"leaf_{team}",
            features=(name,), cpus=template.cpus if template else 64,
            memory_mb=template.memory_mb if template else 512_000,
        ))
        first = last + 1
    whole = f"sim[{1:0{width}d}-{total:0{width}d}]" if total > 1 else f"sim{1:0{width}d}"
    # only these types: the config's own would be types without nodes; checked whole
    out_cfg = revise(dataclasses.replace(cfg, gpu_types=gpu_types), {
        "cluster": {"partitions": [dataclasses.replace(p, nodes=whole)
                                   for p in cfg.cluster.partitions]},
        "node_classes": classes,
    }, source="partitioned cluster")
    kept = [dataclasses.replace(job, gpu_type=partition_type(job.team))
            for job in trace.jobs if job.team in team_nodes]
    dropped = len(trace.jobs) - len(kept)
    out_trace = dataclasses.replace(
        trace, jobs=tuple(kept),
        description=(f"{trace.description}; partitioned by team ({len(team_nodes)} "
                     f"partitions, {total * gpus_per_node} GPUs; {dropped} jobs of teams "
                     "without nodes dropped)"))
    return out_cfg, out_trace
