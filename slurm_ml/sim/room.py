"""The simulated nodes as the contracts' placement planner sees them.

The daemon builds the same view from what slurmctld reports (``placement.cluster_nodes``),
so both plan requeues on ``policy.placement`` from the same kind of input.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from slurm_ml.policy.cluster_jobs import RunningJob
from slurm_ml.policy.placement import NodeSlot, NodeSpec, node_slots
from slurm_ml.sim.cluster import Cluster
from slurm_ml.sim.state import SimState


def placement_nodes(st: SimState, running: Sequence[RunningJob]) -> dict[str, NodeSlot]:
    """Every simulated node (all up), with the room ``running`` (every running job, as
    the daemon passes them) leaves."""
    c = st.cluster
    specs = _SPECS.get(c)
    if specs is None:  # the nodes never change: built once per cluster
        specs = [NodeSpec(name=name, gpu_type=c.type_names[c.type_of[n]],
                          leaf=f"leaf{c.leaf[n]}", gpus=c.gpn[n])
                 for n, name in enumerate(c.names)]
        _SPECS[c] = specs
    return node_slots(specs, running)


_SPECS: weakref.WeakKeyDictionary[Cluster, list[NodeSpec]] = weakref.WeakKeyDictionary()
