"""One cycle's sample of the cluster: who holds and who waits for GPUs, and what is idle.

Fragmented GPUs are free GPUs that no pending job's shape could use: a node with fewer
free GPUs than the smallest pending one-node job of its type asks, or a whole free node
when no pending gang job could gather its nodes. Nothing pending: nothing fragmented.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_ml.sim.result import CycleSample
from slurm_ml.sim.state import SimState


def fragmented_gpus(st: SimState) -> int:
    cluster = st.cluster
    if not cluster.free_total or not st.pending:
        return 0
    one_node: dict[int, int] = {}
    gangs: dict[int, int] = {}
    for gpus, types in st.pending_shapes:
        if cluster.one_node(gpus, types):
            for t in types:
                if gpus < one_node.get(t, 1 << 30):
                    one_node[t] = gpus
        else:
            for group, need in cluster.gang_groups(gpus, types):
                if need < gangs.get(group, 1 << 30):
                    gangs[group] = need
    return cluster.unusable(one_node, gangs)


def sample(st: SimState, owed: Mapping[str, float], delivered: Mapping[str, float],
           ) -> CycleSample:
    c = st.cluster
    return CycleSample(
        t_s=st.now,
        busy_gpus={team: n for team, n in st.busy.items() if n},
        pending_gpus={team: n for team, n in st.waiting.items() if n},
        free_gpus=st.cluster.free_total,
        fragmented_gpus=fragmented_gpus(st),
        owed_gpu_h=owed,
        delivered_gpu_h=delivered,
        busy_by_type={name: c.type_total[i] - c.free_by_type[i]
                      for i, name in enumerate(c.type_names) if c.type_total[i]},
        free_by_type={name: c.free_by_type[i]
                      for i, name in enumerate(c.type_names) if c.type_total[i]},
    )
