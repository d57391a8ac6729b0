"""The cluster as admission sees it: which node classes each partition holds, and how many.

Built once per config (submitd caches it), so that decisions never expand host lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from slurm_ml.config import Config
from slurm_ml.model import GpuType, NodeClass


@dataclass(frozen=True, slots=True)
class ClassSlice:
    """The nodes of one node class that lie in one partition."""

    partition: str
    node_class: NodeClass
    gpu: GpuType
    nodes: int

    @property
    def gpn(self) -> int:
        return self.node_class.gpus_per_node


@dataclass(frozen=True, slots=True)
class ClusterView:
    slices: tuple[ClassSlice, ...]
    partitions: frozenset[str]
    default_partition: str
    feature_to_type: dict[str, str]
    type_order: tuple[str, ...]  # GPU types as listed in the config

    def in_partitions(self, names: tuple[str, ...]) -> tuple[ClassSlice, ...]:
        wanted = set(names) if names else {self.default_partition}
        return tuple(s for s in self.slices if s.partition in wanted)


def cluster_view(cfg: Config) -> ClusterView:
    slices = []
    for part in cfg.cluster.partitions:
        members = NodeSet(part.nodes, resolver=RESOLVER_NOGROUP)
        for cls in cfg.node_classes:
            count = len(members & NodeSet(cls.nodes, resolver=RESOLVER_NOGROUP))
            if count and cls.gpus_per_node > 0 and cls.gpu_type in cfg.gpu_types:
                slices.append(ClassSlice(part.name, cls, cfg.gpu_types[cls.gpu_type], count))
    return ClusterView(
        slices=tuple(slices),
        partitions=frozenset(p.name for p in cfg.cluster.partitions),
        default_partition=cfg.cluster.default_partition.name,
        feature_to_type={t.feature: name for name, t in cfg.gpu_types.items()},
        type_order=tuple(cfg.gpu_types),
    )
