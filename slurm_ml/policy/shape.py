"""Gang and topology shaping: one node when it fits, else whole nodes under one leaf.

A multi-node GPU job that does not fill its nodes strands the rest of each node's GPUs
(nobody else can use 2 GPUs of a node whose NVLink domain is split), so such shapes are
refused with the nearest shapes that work, unless the user opts out (``allow_fragment``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_ml.policy.cluster_view import ClassSlice
from slurm_ml.policy.request import JobRequest

#: Slurm error codes the shim returns on reject; sbatch prints their text after ours.
ESLURM_INVALID_NODE_COUNT = 2006
ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a job's GPUs go: ``nodes`` nodes with ``per_node`` GPUs each."""

    nodes: int
    per_node: int
    ntasks_per_node: int | None = None  # set when a per-task request is spread over nodes
    whole_nodes: bool = False  # multi-node: exclusive, under one leaf switch
    types: tuple[str, ...] = ()  # GPU types this layout can run on

    def describe(self) -> str:
        return f"{self.nodes} node{'s' if self.nodes > 1 else ''} x {self.per_node} GPUs"


@dataclass(frozen=True, slots=True)
class ShapeVerdict:
    layout: Layout | None = None  # None = leave the job's shape as it is
    reject: str | None = None
    code: int = 0
    note: str = ""


def _types(slices: tuple[ClassSlice, ...], order: tuple[str, ...]) -> tuple[str, ...]:
    present = {s.gpu.name for s in slices}
    return tuple(t for t in order if t in present)


def _whole_node_capacity(slices: tuple[ClassSlice, ...]) -> dict[tuple[str, int], int]:
    """(partition, GPUs per node) → how many such nodes that partition has."""
    cap: dict[tuple[str, int], int] = {}
    for s in slices:
        cap[(s.partition, s.gpn)] = cap.get((s.partition, s.gpn), 0) + s.nodes
    return cap


def largest_feasible(slices: tuple[ClassSlice, ...]) -> tuple[int, str]:
    """The most GPUs one job can get here, and how to ask for it."""
    best, how = 0, ""
    for (_part, gpn), nodes in sorted(_whole_node_capacity(slices).items()):
        total = gpn * nodes
        if total > best:
            best = total
            how = (f"--gpus={total} ({nodes} nodes x {gpn} GPUs)" if nodes > 1
                   else f"--gpus={total} (one node)")
    return best, how


def _nearest(total: int, slices: tuple[ClassSlice, ...]) -> list[str]:
    """Valid whole-node shapes just below and above ``total`` GPUs."""
    cap = _whole_node_capacity(slices)
    options: set[tuple[int, int]] = set()
    for (_part, gpn), nodes in cap.items():
        for n in {math.floor(total / gpn), math.ceil(total / gpn)}:
            if 1 <= n <= nodes:
                options.add((n * gpn, n))
        if gpn <= total:
            options.add((gpn, 1))
    ranked = sorted(options, key=lambda o: (abs(o[0] - total), o[0]))[:3]
    return [f"--nodes={n} --gpus-per-node={t // n} ({t} GPUs)" for t, n in sorted(ranked)]


def shape(req: JobRequest, slices: tuple[ClassSlice, ...], order: tuple[str, ...],
          *, allow_fragment: bool) -> ShapeVerdict:
    """Decide the node layout of a GPU job over the node classes it may run on."""
    total = req.total_gpus()
    if total is None or total <= 0:
        return ShapeVerdict(note="per-socket GPU requests are not reshaped")
    if not slices:
        return ShapeVerdict(
            reject="no node in the partitions this job may use has the GPU type it asks for",
            code=ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
    most, how = largest_feasible(slices)
    if total > most:
        return ShapeVerdict(
            reject=(f"the job asks for {total} GPUs but the most any job can get here is "
                    f"{most}, so it would pend forever. Largest feasible request: {how}"),
            code=ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
    max_gpn = max(s.gpn for s in slices)
    if total <= max_gpn:
        return _one_node(req, total, tuple(s for s in slices if s.gpn >= total), order,
                         allow_fragment)
    if allow_fragment:
        return ShapeVerdict(note="allow_fragment: multi-node shape kept as submitted")
    cap = _whole_node_capacity(slices)
    for gpn in sorted({s.gpn for s in slices}, reverse=True):
        nodes = total // gpn
        if total % gpn or not any(n >= nodes for (_p, g), n in cap.items() if g == gpn):
            continue
        ntasks_per_node = None
        per_task = [g for g in req.gpus if g.per == "task"]
        if per_task:
            if not req.num_tasks or req.num_tasks % nodes:
                continue
            ntasks_per_node = req.num_tasks // nodes
        usable = tuple(s for s in slices if s.gpn == gpn)
        return ShapeVerdict(layout=Layout(nodes, gpn, ntasks_per_node, whole_nodes=True,
                                          types=_types(usable, order)))
    nearest = _nearest(total, slices)
    return ShapeVerdict(
        reject=(f"{_asked(req, total)} would strand GPUs: multi-node GPU jobs must use "
                f"whole nodes ({_gpn_list(slices)} GPUs per node here). "
                f"Nearest valid shapes: {'; '.join(nearest)}. To run it as it is, add "
                f"allow_fragment to --comment"),
        code=ESLURM_INVALID_NODE_COUNT)


def _one_node(req: JobRequest, total: int, slices: tuple[ClassSlice, ...],
              order: tuple[str, ...], allow_fragment: bool) -> ShapeVerdict:
    if _on_one_node(req, total):
        return ShapeVerdict()
    if allow_fragment and (req.min_nodes or 1) > 1:
        return ShapeVerdict(note="allow_fragment: multi-node shape kept as submitted")
    return ShapeVerdict(layout=Layout(1, total, types=_types(slices, order)))


def _on_one_node(req: JobRequest, total: int) -> bool:
    """Whether Slurm would already keep this job on one node."""
    if req.min_nodes == 1 and req.max_nodes == 1:
        return True
    if (req.min_nodes or 1) > 1 or (req.max_nodes or 1) > 1:
        return False
    return total == 1 or all(g.per == "node" for g in req.gpus)


def _asked(req: JobRequest, total: int) -> str:
    if req.min_nodes and req.min_nodes > 1:
        return f"{req.min_nodes} nodes with {total // req.min_nodes} GPUs each"
    return f"{total} GPUs"


def _gpn_list(slices: tuple[ClassSlice, ...]) -> str:
    return " or ".join(str(g) for g in sorted({s.gpn for s in slices}, reverse=True))
