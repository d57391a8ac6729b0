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


Capacity = dict[tuple[str, str, int], int]


def _capacity(slices: tuple[ClassSlice, ...]) -> Capacity:
    """(partition, GPU type, GPUs per node) → how many such nodes that partition has.

    A gang runs on one GPU type (mixing 80 GB and 40 GB cards in one job leaves the
    big ones half used), so capacity is never added up across types.
    """
    cap: Capacity = {}
    for s in slices:
        key = (s.partition, s.gpu.name, s.gpn)
        cap[key] = cap.get(key, 0) + s.nodes
    return cap


def _ordered(types: set[str], order: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(t for t in order if t in types)


def largest_feasible(slices: tuple[ClassSlice, ...]) -> tuple[int, str]:
    """The most GPUs one job can get here, and how to ask for it."""
    best, how = 0, ""
    for (_part, _type, gpn), nodes in sorted(_capacity(slices).items()):
        total = gpn * nodes
        if total > best:
            best = total
            how = (f"--gpus={total} ({nodes} nodes x {gpn} GPUs)" if nodes > 1
                   else f"--gpus={total} (one node)")
    return best, how


def _nearest(total: int, slices: tuple[ClassSlice, ...]) -> list[str]:
    """Valid whole-node shapes just below and above ``total`` GPUs."""
    options: set[tuple[int, int]] = set()
    for (_part, _type, gpn), nodes in _capacity(slices).items():
        for n in {math.floor(total / gpn), math.ceil(total / gpn)}:
            if 1 <= n <= nodes:
                options.add((n * gpn, n))
        if gpn <= total:
            options.add((gpn, 1))
    ranked = sorted(options, key=lambda o: (abs(o[0] - total), o[0]))[:3]
    return [f"--nodes={n} --gpus-per-node={t // n} ({t} GPUs)" for t, n in sorted(ranked)]


def _tasks(req: JobRequest) -> int | None:
    """How many tasks the job runs, when it says."""
    if req.num_tasks:
        return req.num_tasks
    if req.ntasks_per_node:
        return req.ntasks_per_node * (req.min_nodes or 1)
    return None


def shape(req: JobRequest, slices: tuple[ClassSlice, ...], order: tuple[str, ...],
          *, allow_fragment: bool) -> ShapeVerdict:
    """Decide the node layout of a GPU job over the node classes it may run on."""
    total = req.total_gpus()
    if total is None or total <= 0:
        return ShapeVerdict(note="Per-socket GPU requests are not reshaped")
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
    tasks = _tasks(req)
    if total <= max(s.gpn for s in slices):
        if _on_one_node(req, total):
            return ShapeVerdict()
        if allow_fragment and (req.min_nodes or 1) > 1:
            return ShapeVerdict(note="allow_fragment: multi-node shape kept as submitted")
        fits = {s.gpu.name for s in slices if s.gpn >= total}
        per_node_tasks = tasks if req.ntasks_per_node is not None else None
        return ShapeVerdict(layout=Layout(1, total, per_node_tasks,
                                          types=_ordered(fits, order)))
    if allow_fragment:
        return ShapeVerdict(note="allow_fragment: multi-node shape kept as submitted")
    cap = _capacity(slices)
    per_task = any(g.per == "task" for g in req.gpus)
    for gpn in sorted({s.gpn for s in slices}, reverse=True):
        nodes = total // gpn
        if total % gpn:
            continue
        fits = {t for (_p, t, g), n in cap.items() if g == gpn and n >= nodes}
        if not fits:
            continue
        if per_task and (not tasks or tasks % nodes):
            continue  # GPUs are bound to tasks: the tasks must split evenly
        ntasks_per_node = math.ceil(tasks / nodes) if tasks else None
        return ShapeVerdict(layout=Layout(nodes, gpn, ntasks_per_node, whole_nodes=True,
                                          types=_ordered(fits, order)))
    nearest = _nearest(total, slices)
    return ShapeVerdict(
        reject=(f"{_asked(req, total)} would strand GPUs: multi-node GPU jobs must use "
                f"whole nodes ({_gpn_list(slices)} GPUs per node here). "
                f"Nearest valid shapes: {'; '.join(nearest)}. To run it as it is, add "
                f"allow_fragment to --comment"),
        code=ESLURM_INVALID_NODE_COUNT)


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
