"""The simulated nodes as the contracts' placement planner sees them.

The daemon builds the same view from what slurmctld reports (``placement.cluster_nodes``),
so both plan requeues on ``policy.placement`` from the same kind of input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from slurm_ml.policy.cluster_jobs import RunningJob
from slurm_ml.policy.placement import NodeSlot, NodeSpec, node_slots
from slurm_ml.sim.state import SimState


def placement_nodes(st: SimState, running: Sequence[RunningJob]) -> dict[str, NodeSlot]:
    """Every simulated node (those under repair not usable), with the room ``running``
    (every running job, as the daemon passes them) leaves."""
    specs = [dataclasses.replace(spec, usable=False) if n in st.down else spec
             for n, spec in enumerate(_specs(st))]
    return node_slots(specs, running)


def placement_nodes_now(st: SimState) -> dict[str, NodeSlot]:
    """``placement_nodes(st, every running job)``, the same value, from what the state
    keeps as jobs start and stop (``SimState.held_on``): only the nodes changed since
    the last call get a new slot, instead of a walk over every running job per cycle."""
    specs = _specs(st)
    slots = st.room_slots
    if not slots:
        slots.update((spec.name, _slot(st, n, spec)) for n, spec in enumerate(specs))
    else:
        for n in st.room_dirty:
            slots[specs[n].name] = _slot(st, n, specs[n])
    st.room_dirty.clear()
    return dict(slots)


def _slot(st: SimState, n: int, spec: NodeSpec) -> NodeSlot:
    if n in st.down:  # under repair: a drained node, as the daemon sees one
        return NodeSlot(spec=dataclasses.replace(spec, usable=False), free=0, held=())
    held = st.held_on.get(n)
    if not held:
        return NodeSlot(spec=spec, free=spec.gpus, held=())
    return NodeSlot(spec=spec, free=max(0, spec.gpus - sum(held.values())),
                    held=tuple(held.items()))


def _specs(st: SimState) -> list[NodeSpec]:
    """The nodes never change: built once per run, kept on the state (not in a weak map
    keyed by the cluster, which a compiled ``Cluster`` could not be a key of)."""
    if not st.room_specs:
        c = st.cluster
        st.room_specs.extend(NodeSpec(name=name, gpu_type=c.type_names[c.type_of[n]],
                                      leaf=f"leaf{c.leaf[n]}", gpus=c.gpn[n])
                             for n, name in enumerate(c.names))
    return st.room_specs
