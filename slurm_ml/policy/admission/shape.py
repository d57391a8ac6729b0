"""Gang and topology shaping: one node when it fits, else whole nodes under one leaf.

A multi-node GPU job that does not fill its nodes strands the rest of each node's GPUs
(nobody else can use 2 GPUs of a node whose NVLink domain is split), so such shapes are
refused with the nearest shapes that work, unless the user opts out (``allow_fragment``).

Only what the user left open is shaped. A total GPU count with no layout (``--gpus=16``,
or ``--gpus-per-task`` with ``--ntasks``) may be laid out anew; a node count (``-N``, or
the nodes that ``--ntasks`` with ``--ntasks-per-node`` imply), tasks per node and GPUs per
node or per task are the script's contract with its own code and are kept. A kept
multi-node shape is steered to the node classes it fills exactly, or refused with the
reason and a fix in the script's own flags; a node range is kept, or narrowed with a note
saying so. Every layout must also fit one node class in CPUs and memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slurm_ml.model import GpuRequest, NodeClass
from slurm_ml.policy.admission.cluster_view import ClassSlice
from slurm_ml.policy.admission.request import JobRequest

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
    max_nodes: int | None = None  # a node range kept (or narrowed): nodes..max_nodes

    def describe(self) -> str:
        top = self.max_nodes or self.nodes
        count = f"{self.nodes}-{top}" if top > self.nodes else str(self.nodes)
        return f"{count} node{'s' if top > 1 else ''} x {self.per_node} GPUs"


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


# ------------------------------------------------------------------------ what a node needs

def _scope(req: JobRequest) -> str:
    """Which option decides the job's GPU count, as Slurm reads them: job, node or task."""
    given = {g.per for g in req.gpus if g.count > 0}
    return next((p for p in ("job", "node", "socket", "task") if p in given), "job")


def tasks_per_node(req: JobRequest, nodes: int) -> int:
    """Tasks on each node of an ``nodes``-node layout (--ntasks-per-node is a maximum)."""
    spread = math.ceil(req.num_tasks / nodes) if req.num_tasks else None
    if req.ntasks_per_node:
        return min(req.ntasks_per_node, spread) if spread else req.ntasks_per_node
    return spread or 1


def node_needs(req: JobRequest, nodes: int, per_node: int) -> tuple[int, int]:
    """CPUs and memory (MB) each node needs when the job runs as nodes x per_node GPUs.

    --mem is per node (0: all of it, which any node has), --mem-per-cpu is per allocated
    CPU, --mem-per-gpu per GPU; CPUs are tasks x --cpus-per-task, or GPUs x --cpus-per-gpu,
    at least --mincpus and the node's share of the job's minimum CPUs.
    """
    cpus = tasks_per_node(req, nodes) * (req.cpus_per_task or 1)
    if req.cpus_per_gpu:
        cpus = max(cpus, per_node * req.cpus_per_gpu)
    if req.pn_min_cpus:
        cpus = max(cpus, req.pn_min_cpus)
    if req.min_cpus:
        cpus = max(cpus, math.ceil(req.min_cpus / nodes))
    mem = req.mem_per_node_mb or 0
    if req.mem_per_cpu_mb:
        mem = max(mem, cpus * req.mem_per_cpu_mb)
    if req.mem_per_gpu_mb:
        mem = max(mem, per_node * req.mem_per_gpu_mb)
    return cpus, mem


def holds_share(req: JobRequest, cls: NodeClass, nodes: int, per_node: int) -> bool:
    """Whether a node of this class can hold one node's share of the job at all, as Slurm
    judges it: at least ``per_node`` GPUs, and its CPUs and memory."""
    if cls.gpus_per_node < per_node:
        return False
    cpus, mem = node_needs(req, nodes, per_node)
    return cpus <= cls.cpus and mem <= cls.memory_mb


def takes_whole_node(req: JobRequest, cls: NodeClass, nodes: int, per_node: int) -> bool:
    """Whether one node's share of the job takes all of a node of this class's CPUs or all
    of its memory (``--mem=0`` asks for all of it). Then no other job can use the node's
    other GPUs whatever the job's GPUs per node: the node is the job's whole, and running
    it there exclusive strands no GPUs that its CPUs or memory did not already take."""
    cpus, mem = node_needs(req, nodes, per_node)
    return cpus >= cls.cpus or req.mem_per_node_mb == 0 or mem >= cls.memory_mb


def fits_class(req: JobRequest, cls: NodeClass, nodes: int, per_node: int) -> bool:
    """Whether a node of this class holds one node's share of the job: GPUs, CPUs, memory,
    and on several nodes as whole nodes: its GPUs per node fill the node, or its CPUs or
    memory per node take the whole node anyway (``takes_whole_node``)."""
    if not holds_share(req, cls, nodes, per_node):
        return False
    return (nodes == 1 or cls.gpus_per_node == per_node
            or takes_whole_node(req, cls, nodes, per_node))


def types_for(req: JobRequest, slices: tuple[ClassSlice, ...], nodes: int,
              per_node: int) -> set[str]:
    """GPU types with ``nodes`` nodes in one partition that each hold ``per_node`` GPUs of
    the job and its CPUs and memory (``fits_class``). On several nodes, the types whose
    nodes it fills exactly come first: nodes it takes whole only by its CPUs or memory are
    named only when no such type can hold it."""
    exact: dict[tuple[str, str], int] = {}
    whole: dict[tuple[str, str], int] = {}
    for s in slices:
        if fits_class(req, s.node_class, nodes, per_node):
            cap = exact if nodes == 1 or s.gpn == per_node else whole
            key = (s.partition, s.gpu.name)
            cap[key] = cap.get(key, 0) + s.nodes
    return ({t for (_p, t), n in exact.items() if n >= nodes}
            or {t for (_p, t), n in whole.items() if n >= nodes})


def _per_node(req: JobRequest, nodes: int) -> int | None:
    """GPUs on each node when the job runs on ``nodes`` nodes; None when they do not split
    evenly (or its tasks do not, for per-task GPUs)."""
    total = replace(req, min_nodes=nodes).total_gpus()
    if not total or total % nodes:
        return None
    if req.num_tasks and req.ntasks_per_node and req.ntasks_per_node * nodes < req.num_tasks:
        return None  # its tasks do not fit that many nodes
    if _scope(req) == "task" and req.num_tasks and req.num_tasks % nodes:
        return None
    return total // nodes


def _without_needs(req: JobRequest) -> JobRequest:
    return replace(req, cpus_per_task=None, cpus_per_gpu=None, min_cpus=None,
                   pn_min_cpus=None, mem_per_node_mb=None, mem_per_cpu_mb=None,
                   mem_per_gpu_mb=None)


def _has_needs(req: JobRequest) -> bool:
    return _without_needs(req) != req


def pinned_nodes(req: JobRequest) -> tuple[int, int] | None:
    """The node count (or range) the job fixed: -N, or what --ntasks with
    --ntasks-per-node implies; None when it left the node count open."""
    if req.min_nodes is not None:
        return req.min_nodes, max(req.max_nodes or req.min_nodes, req.min_nodes)
    if req.ntasks_per_node and req.num_tasks:
        nodes = math.ceil(req.num_tasks / req.ntasks_per_node)
        return nodes, nodes
    return None


# ------------------------------------------------------------------------ shaping

def shape(req: JobRequest, slices: tuple[ClassSlice, ...], order: tuple[str, ...],
          *, allow_fragment: bool, advise: bool = True) -> ShapeVerdict:
    """Decide the node layout of a GPU job over the node classes it may run on.

    ``advise=False``: a refusal names no fixes (used to check the fixes themselves).
    """
    total = req.total_gpus()
    if total is None or total <= 0 or any(g.per == "socket" for g in req.gpus):
        return ShapeVerdict(note="Per-socket GPU requests are not reshaped")
    if not slices:
        return ShapeVerdict(
            reject="no node in the partitions this job may use has the GPU type it asks for",
            code=ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
    pinned = pinned_nodes(req)
    if pinned is not None:
        return _shape_pinned(req, slices, order, pinned, total, allow_fragment=allow_fragment,
                             advise=advise)
    return _shape_open(req, slices, order, total, allow_fragment=allow_fragment,
                       advise=advise)


def _shape_open(req: JobRequest, slices: tuple[ClassSlice, ...], order: tuple[str, ...],
                total: int, *, allow_fragment: bool, advise: bool) -> ShapeVerdict:
    """The user gave a GPU total (per job, or per task with a task count): lay it out."""
    tasks = req.num_tasks
    one = types_for(req, slices, 1, total)
    if one:
        if _on_one_node(req, total):
            return ShapeVerdict()
        return ShapeVerdict(layout=Layout(1, total, types=_ordered(one, order)))
    if allow_fragment and total > max(s.gpn for s in slices):
        return ShapeVerdict(note="allow_fragment: multi-node shape kept as submitted")
    per_task = _scope(req) == "task"
    for gpn in sorted({s.gpn for s in slices}, reverse=True):
        nodes = total // gpn
        if total % gpn or nodes < 2:
            continue
        if per_task and (not tasks or tasks % nodes):
            continue  # GPUs are bound to tasks: the tasks must split evenly
        fits = types_for(req, slices, nodes, gpn)
        if not fits:
            continue
        ntasks_per_node = math.ceil(tasks / nodes) if tasks else None
        return ShapeVerdict(layout=Layout(nodes, gpn, ntasks_per_node, whole_nodes=True,
                                          types=_ordered(fits, order)))
    return _reject(req, slices, total, None, advise=advise)


def _shape_pinned(req: JobRequest, slices: tuple[ClassSlice, ...], order: tuple[str, ...],
                  pinned: tuple[int, int], total: int, *, allow_fragment: bool,
                  advise: bool) -> ShapeVerdict:
    """The user fixed the node count (or a range): keep it, steer it, narrow a range, or
    refuse it."""
    lo, hi = pinned
    hi = min(hi, lo + sum(s.nodes for s in slices))
    feasible: dict[int, set[str]] = {}
    for n in range(lo, hi + 1):
        per_node = _per_node(req, n)
        feasible[n] = types_for(req, slices, n, per_node) if per_node else set()
    first = next((n for n in range(lo, hi + 1) if feasible[n]), None)
    if first is None:
        need = max(lo, math.ceil(req.num_tasks / req.ntasks_per_node)
                   if req.num_tasks and req.ntasks_per_node else lo)
        if allow_fragment and need > 1:
            return ShapeVerdict(note="allow_fragment: multi-node shape kept as submitted")
        return _reject(req, slices, replace(req, min_nodes=need).total_gpus() or total,
                       need, advise=advise)
    common, top = set(feasible[first]), first
    if _scope(req) == "node":  # the same GPUs per node at every count: keep the range
        for n in range(first + 1, hi + 1):
            if not common & feasible[n]:
                break
            common &= feasible[n]
            top = n
    per_node = _per_node(req, first) or 0
    note = ""
    if (first, top) != (lo, hi):
        kept = f"{first}-{top}" if top > first else str(first)
        why = (f"on more nodes, {per_node} GPUs per node would not be whole nodes of one "
               f"GPU type with room for its CPUs and memory here" if top < hi else
               "on fewer nodes its GPUs, CPUs or memory would not fit")
        note = f"Node range {lo}-{pinned[1]} narrowed to {kept}: {why}"
    whole = _whole_node_note(req, slices, common, top, per_node) if top > 1 else ""
    if whole:
        note = f"{note}. {whole}" if note else whole
    if top == 1:
        if not note:
            return ShapeVerdict()
        return ShapeVerdict(layout=Layout(1, per_node, types=_ordered(common, order)),
                            note=note)
    return ShapeVerdict(layout=Layout(first, per_node, whole_nodes=True,
                                      types=_ordered(common, order),
                                      max_nodes=top if top > first else None), note=note)


def _whole_node_note(req: JobRequest, slices: tuple[ClassSlice, ...], types: set[str],
                     nodes: int, per_node: int) -> str:
    """Why a multi-node job runs on nodes with more GPUs than it asks for per node: its
    CPUs or memory per node take those nodes whole (``takes_whole_node``)."""
    big = [s for s in slices if s.gpu.name in types and s.gpn > per_node
           and fits_class(req, s.node_class, nodes, per_node)]
    if not big:
        return ""
    cls = big[0].node_class
    cpus, mem = node_needs(req, nodes, per_node)
    what = []
    if cpus >= cls.cpus:
        what.append(f"{cpus} CPUs")
    if req.mem_per_node_mb == 0:
        what.append("memory (--mem=0: all of it)")
    elif mem >= cls.memory_mb:
        what.append(f"{_mem(mem)} of memory")
    gpns = " or ".join(str(g) for g in sorted({s.gpn for s in big}, reverse=True))
    return (f"On nodes with {gpns} GPUs its {' and '.join(what)} per node take the whole "
            f"node, so it runs there whole, with {per_node} GPUs each: the others are left "
            f"idle by its CPUs or memory, not by its GPU count")


def _on_one_node(req: JobRequest, total: int) -> bool:
    """Whether Slurm would already keep this job on one node."""
    if req.min_nodes == 1 and req.max_nodes == 1:
        return True
    if (req.min_nodes or 1) > 1 or (req.max_nodes or 1) > 1:
        return False
    return total == 1 or all(g.per == "node" for g in req.gpus)


# ------------------------------------------------------------------------ refusals

def _reject(req: JobRequest, slices: tuple[ClassSlice, ...], total: int,
            nodes: int | None, *, advise: bool) -> ShapeVerdict:
    """Why no layout works, and fixes in the script's own flags that admission accepts.

    The reason is what Slurm itself would conclude: "would pend forever" only when no set
    of nodes in one partition can hold the job (an untyped request may run on any GPU
    type, several at once); a shape Slurm would place but slurm-ml does not (GPUs left
    idle, GPU types mixed in one multi-node job) is refused for that, saying so.
    """

    def advice() -> str:  # only the refusals that name fixes pay for finding them
        fixes = _fixes(req, slices, total, nodes) if advise else []
        return f" Nearest valid requests: {'; '.join(fixes)}." if fixes else ""

    def done(text: str, code: int) -> ShapeVerdict:
        return ShapeVerdict(reject=text.rstrip("."), code=code)

    frag = " To run it as it is, add allow_fragment to --comment." if (
        (nodes and nodes > 1 and _placeable_as_is(req, slices, nodes))
        or (nodes is None and total > max(s.gpn for s in slices)
            and total <= slurm_most_gpus(slices))) else ""
    bare = _without_needs(req)
    per_node = _per_node(bare, nodes) if nodes is not None and nodes > 1 else None
    if per_node:  # a kept multi-node shape: first, could Slurm place it at all?
        room = slurm_room(req, slices, nodes or 1, per_node)
        if room < (nodes or 1):
            return done(f"the job asks for {total} GPUs on {nodes} nodes ({per_node} per "
                        f"node), but {_why_no_room(req, slices, nodes or 1, per_node)}, so "
                        f"it would pend forever.{advice()}",
                        ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        one_type = _one_type_room(slices, per_node)
        exact = _exact_room(slices, per_node)
        if 0 < one_type < (nodes or 1) <= exact:
            types = sorted({s.gpu.name for s in slices if s.gpn == per_node})
            return done(f"the job asks for {total} GPUs on {nodes} nodes ({per_node} per "
                        f"node), but at most {one_type} nodes of one GPU type here have "
                        f"{per_node} GPUs. Slurm would run it across GPU types "
                        f"({', '.join(types)}); slurm-ml keeps a multi-node job on one GPU "
                        f"type, so that its fastest GPUs do not wait on its slowest."
                        f"{advice()}{frag}", ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        return done(f"{_asked(req, total, nodes)} would strand GPUs: "
                    f"{_strand_why(req, slices, nodes or 1, per_node)}; multi-node GPU "
                    f"jobs must use whole nodes ({_gpn_list(slices)} GPUs per node here)."
                    f"{advice()}{frag}", ESLURM_INVALID_NODE_COUNT)
    gpu_fit = (shape(bare, slices, (), allow_fragment=False, advise=False).reject is None
               if _has_needs(req) else False)
    if gpu_fit:
        return done(f"{_needs_text(req, slices, nodes, total)}.{advice()}",
                    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
    most, how = largest_feasible(slices)
    if nodes is None and total > most:
        if total > slurm_most_gpus(slices):
            head = f"{_most_text(total, slices, most)}, so it would pend forever"
        else:
            head = (f"the job asks for {total} GPUs, more than whole nodes of one GPU type "
                    f"give here ({most}); Slurm would spread it over GPU types or leave GPUs "
                    f"idle, and slurm-ml keeps a multi-node job on whole nodes of one GPU "
                    f"type")
        return done(f"{head}. Largest feasible request: "
                    f"{_largest_in_own_terms(req, slices, how)}.{frag}",
                    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
    if nodes is not None and nodes > 1 and total > slurm_most_gpus(slices):
        return done(f"{_most_text(total, slices, most, nodes)}, so it would pend forever."
                    f"{advice()}", ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
    return done(f"{_asked(req, total, nodes)} would strand GPUs: multi-node GPU jobs must "
                f"use whole nodes ({_gpn_list(slices)} GPUs per node here).{advice()}{frag}",
                ESLURM_INVALID_NODE_COUNT)


def _most_text(total: int, slices: tuple[ClassSlice, ...], most: int,
               nodes: int | None = None) -> str:
    """"asks for more than any job can get": all GPUs of a partition, as Slurm counts."""
    anywhere = slurm_most_gpus(slices)
    whole = f" ({most} on whole nodes of one GPU type)" if most < anywhere else ""
    on = f" on {nodes} nodes" if nodes else ""
    return (f"the job asks for {total} GPUs{on} but the most any job can get here is "
            f"{anywhere}{whole}")


def slurm_room(req: JobRequest, slices: tuple[ClassSlice, ...], nodes: int,
               per_node: int, *, needs: bool = True) -> int:
    """The most nodes of one partition that Slurm could give one node's share of the job:
    ``per_node`` GPUs or more, of any GPU type the slices hold (an untyped request runs on
    any, a typed one's slices hold only its types) and, with ``needs``, its CPUs and
    memory (``holds_share``)."""
    room: dict[str, int] = {}
    for s in slices:
        if (s.gpn >= per_node if not needs
                else holds_share(req, s.node_class, nodes, per_node)):
            room[s.partition] = room.get(s.partition, 0) + s.nodes
    return max(room.values(), default=0)


def slurm_most_gpus(slices: tuple[ClassSlice, ...]) -> int:
    """The most GPUs Slurm could give one job here: every GPU of one partition (of the
    types the slices hold)."""
    room: dict[str, int] = {}
    for s in slices:
        room[s.partition] = room.get(s.partition, 0) + s.gpn * s.nodes
    return max(room.values(), default=0)


def _one_type_room(slices: tuple[ClassSlice, ...], per_node: int) -> int:
    """The most nodes of one GPU type in one partition that have exactly ``per_node``."""
    return max(_capacity(tuple(s for s in slices if s.gpn == per_node)).values(), default=0)


def _exact_room(slices: tuple[ClassSlice, ...], per_node: int) -> int:
    """The most nodes of one partition, of any GPU types, that have exactly ``per_node``."""
    return slurm_room(JobRequest(user=""), tuple(s for s in slices if s.gpn == per_node),
                      1, per_node, needs=False)


def _why_no_room(req: JobRequest, slices: tuple[ClassSlice, ...], nodes: int,
                 per_node: int) -> str:
    """Why fewer than ``nodes`` nodes of one partition can hold the job's share."""
    gpu_room = slurm_room(req, slices, nodes, per_node, needs=False)
    if gpu_room < nodes:
        kind = "/".join(sorted(req.typed_gpus))
        what = f"{per_node} {kind} GPUs" if kind else f"{per_node} GPUs or more"
        return (f"only {gpu_room} node{' here has' if gpu_room == 1 else 's here have'} "
                f"{what}")
    cpus, mem = node_needs(req, nodes, per_node)
    big = [s.node_class for s in slices if s.gpn >= per_node]
    return (f"it needs {_over(cpus, mem, big)} per node, more than any node with "
            f"{per_node} GPUs or more has ({_class_sizes(slices, per_node)})")


def _strand_why(req: JobRequest, slices: tuple[ClassSlice, ...], nodes: int,
                per_node: int) -> str:
    """Why a multi-node shape Slurm can place strands GPUs: the nodes it fits have more."""
    exact = [s for s in slices if s.gpn == per_node]
    idle = sorted({s.gpn - per_node for s in slices if s.gpn > per_node
                   and holds_share(req, s.node_class, nodes, per_node)})
    where = (f"it would leave {' or '.join(str(i) for i in idle)} GPUs of each node idle"
             if idle else "it would leave GPUs idle")
    if not exact:
        return (f"no node here has exactly {per_node} GPU{'s' if per_node != 1 else ''}, "
                f"so {where}")
    if any(holds_share(req, s.node_class, nodes, per_node) for s in exact):
        return (f"at most {_one_type_room(slices, per_node)} nodes of one GPU type here "
                f"have {per_node} GPUs, so {where}")
    cpus, mem = node_needs(req, nodes, per_node)
    return (f"the {per_node}-GPU nodes lack the {_over(cpus, mem, [s.node_class for s in exact])} "
            f"it needs per node, so {where}")


def _placeable_as_is(req: JobRequest, slices: tuple[ClassSlice, ...], nodes: int) -> bool:
    """Whether the kept shape (allow_fragment) has nodes that can hold it."""
    per_node = math.ceil((req.total_gpus() or 0) / nodes)
    return slurm_room(req, slices, nodes, per_node) >= nodes


def _asked(req: JobRequest, total: int, nodes: int | None = None) -> str:
    nodes = nodes or req.min_nodes
    gpus = f"{total} GPUs" if total != 1 else "1 GPU"
    if nodes and nodes > 1:
        if total % nodes:
            return f"{gpus} on {nodes} nodes"
        each = total // nodes
        return f"{nodes} nodes with {each} GPU{'s' if each != 1 else ''} each"
    return gpus


def _gpn_list(slices: tuple[ClassSlice, ...]) -> str:
    return " or ".join(str(g) for g in sorted({s.gpn for s in slices}, reverse=True))


def _class_sizes(slices: tuple[ClassSlice, ...], per_node: int = 0) -> str:
    """The CPUs and memory of the node classes with ``per_node`` GPUs or more."""
    sizes = sorted({(s.gpn, s.node_class.cpus, s.node_class.memory_mb) for s in slices
                    if s.gpn >= per_node}, reverse=True)
    return "; ".join(f"{g}-GPU nodes: {c} CPUs, {_mem(m)}" for g, c, m in sizes)


def _mem(mb: int) -> str:
    return f"{mb // 1024} GB" if mb >= 1024 and mb % 1024 == 0 else f"{mb} MB"


def _over(cpus: int, mem: int, classes: list[NodeClass]) -> str:
    """The part of ``cpus`` CPUs and ``mem`` MB that no class in ``classes`` has."""
    parts = []
    if cpus > max((c.cpus for c in classes), default=0):
        parts.append(f"{cpus} CPUs")
    if mem > max((c.memory_mb for c in classes), default=0):
        parts.append(f"{_mem(mem)} of memory")
    if not parts:  # enough of each somewhere, never both on one node
        parts = [f"{cpus} CPUs", f"{_mem(mem)} of memory"]
    return " and ".join(parts)


def _needs_text(req: JobRequest, slices: tuple[ClassSlice, ...], nodes: int | None,
                total: int) -> str:
    """What each node would need in the layout its GPUs alone would get, in CPUs and
    memory, naming only what no node with that many GPUs has (and listing those nodes)."""
    laid = shape(_without_needs(req), slices, (), allow_fragment=False, advise=False).layout
    if laid is not None:
        n, per_node = laid.nodes, laid.per_node
        how = "" if nodes is not None else f" as {laid.describe()}"
    else:
        n = nodes or 1
        per_node, how = _per_node(req, n) or total, ""
    cpus, mem = node_needs(req, n, per_node)
    room = [s.node_class for s in slices if s.gpn >= per_node]
    return (f"the job needs {_over(cpus, mem, room)} per node ({_asked(req, total, nodes)}"
            f"{how}), more than any node that can hold its GPUs has "
            f"({_class_sizes(slices, per_node)})")


def _largest_in_own_terms(req: JobRequest, slices: tuple[ClassSlice, ...], how: str) -> str:
    if _scope(req) == "task":
        per_task = sum(g.count for g in req.gpus if g.per == "task")
        most, _ = largest_feasible(slices)
        if per_task and most // per_task:
            return f"--ntasks={most // per_task} ({most // per_task * per_task} GPUs)"
    return how


def _size_flag(name: str, mb: int) -> str:
    return f"--{name}={mb // 1024}G" if mb >= 1024 else f"--{name}={mb}M"


def _resource_fixes(req: JobRequest, slices: tuple[ClassSlice, ...], nodes: int,
                    per_node: int) -> list[tuple[JobRequest, list[str]]]:
    """For each node class that holds the GPU layout, the request lowered to fit its CPUs
    and memory, and the flags that say so (none when it fits already)."""
    out = []
    for s in sorted(slices, key=lambda x: (-x.node_class.cpus, -x.node_class.memory_mb)):
        cls = s.node_class
        if cls.gpus_per_node < per_node or (nodes > 1 and cls.gpus_per_node != per_node):
            continue
        fixed, flags = req, []
        tasks = tasks_per_node(req, nodes)
        if req.cpus_per_task and tasks * req.cpus_per_task > cls.cpus:
            if cls.cpus // tasks < 1:
                continue
            fixed = replace(fixed, cpus_per_task=cls.cpus // tasks, min_cpus=None)
            flags.append(f"--cpus-per-task={cls.cpus // tasks}")
        if req.cpus_per_gpu and per_node * req.cpus_per_gpu > cls.cpus:
            fixed = replace(fixed, cpus_per_gpu=cls.cpus // per_node, min_cpus=None)
            flags.append(f"--cpus-per-gpu={cls.cpus // per_node}")
        if req.pn_min_cpus and req.pn_min_cpus > cls.cpus:
            fixed = replace(fixed, pn_min_cpus=cls.cpus)
            flags.append(f"--mincpus={cls.cpus}")
        cpus, _mem_mb = node_needs(fixed, nodes, per_node)
        if cpus > cls.cpus:
            continue
        if req.mem_per_node_mb and req.mem_per_node_mb > cls.memory_mb:
            mb = cls.memory_mb // 1024 * 1024 or cls.memory_mb
            fixed = replace(fixed, mem_per_node_mb=mb)
            flags.append(_size_flag("mem", mb))
        if req.mem_per_gpu_mb and per_node * req.mem_per_gpu_mb > cls.memory_mb:
            mb = cls.memory_mb // per_node
            mb = mb // 1024 * 1024 or mb
            fixed = replace(fixed, mem_per_gpu_mb=mb)
            flags.append(_size_flag("mem-per-gpu", mb))
        if req.mem_per_cpu_mb and cpus * req.mem_per_cpu_mb > cls.memory_mb:
            mb = cls.memory_mb // cpus
            fixed = replace(fixed, mem_per_cpu_mb=mb)
            flags.append(f"--mem-per-cpu={mb}M")
        out.append((fixed, flags))
    return out


def _fixes(req: JobRequest, slices: tuple[ClassSlice, ...], total: int,
           nodes: int | None) -> list[str]:
    """Up to three changes, in the flags the job already uses, after which admission
    accepts it; each is checked by shaping the changed request again.

    A change that keeps the job's total GPUs and tasks (``_keeping``: another node count
    with its GPUs and tasks per node to match) comes before any that gives up GPUs; the
    others change the node count (and --ntasks with it) and keep GPUs per node."""
    shapes: list[tuple[JobRequest, list[str]]] = []
    scope = _scope(req)
    most_nodes = sum(s.nodes for s in slices)
    if nodes is not None:
        shapes += _keeping(req, nodes, most_nodes)
    if nodes is not None and req.min_nodes is None:  # --ntasks / --ntasks-per-node
        per = req.ntasks_per_node or 1
        for n in range(1, most_nodes + 1):
            if n != nodes:
                shapes.append((replace(req, num_tasks=per * n), [f"--ntasks={per * n}"]))
    elif nodes is not None:  # the node count is the script's: change it, keep the rest
        for n in range(1, most_nodes + 1):
            if n == nodes:
                continue
            changed = replace(req, min_nodes=n, max_nodes=n)
            flags = [f"--nodes={n}"]
            if req.num_tasks and req.ntasks_per_node:  # (--ntasks may be the script's)
                changed = replace(changed, num_tasks=req.ntasks_per_node * n)
                flags.append(f"--ntasks={req.ntasks_per_node * n}")
            elif req.num_tasks and not req.ntasks_per_node:
                tasks = req.num_tasks * n // nodes
                if tasks < 1 or req.num_tasks * n % nodes:
                    continue
                changed = replace(changed, num_tasks=tasks)
                flags.append(f"--ntasks={tasks}")
            shapes.append((changed, flags))
    elif scope == "task" and req.num_tasks:
        per_task = sum(g.count for g in req.gpus if g.per == "task")
        for s in slices:
            for n in range(1, s.nodes + 1):
                gpus = s.gpn * n
                if gpus % per_task == 0 and gpus // per_task != req.num_tasks:
                    shapes.append((replace(req, num_tasks=gpus // per_task),
                                   [f"--ntasks={gpus // per_task}"]))
    elif scope == "job" and all(g.per == "job" for g in req.gpus):
        # (with --gpus-per-task or per node too, a new --gpus would contradict them)
        gtype = next((g.gpu_type for g in req.gpus if g.per == "job"), None)
        kind = f"{gtype}:" if gtype else ""
        for s in slices:
            for n in range(1, s.nodes + 1):
                gpus = s.gpn * n
                if gpus != total:
                    shapes.append((replace(req, gpus=(GpuRequest(gpus, "job", gtype),)),
                                   [f"--gpus={kind}{gpus}"]))
    shapes.insert(0, (req, []))
    ranked: list[tuple[tuple[int, int, int, int], str]] = []
    seen: set[str] = set()
    # One slice per node count per class yields the same candidate many times over; the
    # flags determine the changed request, so each distinct one is shaped only once.
    laid_for: dict[tuple[str, ...], ShapeVerdict] = {}
    fits: dict[str, bool] = {}
    job_tasks = _tasks(req)
    for changed, flags in shapes:
        got = changed.total_gpus() or 0
        changes_job = int(got != total or _tasks(changed) != job_tasks)
        key = tuple(flags)
        if key not in laid_for:
            laid_for[key] = shape(_without_needs(changed), slices, (), allow_fragment=False,
                                  advise=False)
        laid = laid_for[key]
        if laid.reject is not None:
            continue
        if laid.layout is not None:
            n, per_node = laid.layout.nodes, laid.layout.per_node
        else:
            pinned = pinned_nodes(changed)
            n = pinned[0] if pinned else 1
            per_node = _per_node(changed, n) or got
        for fixed, more in _resource_fixes(changed, slices, n, per_node):
            if not flags and not more:
                continue
            text = " ".join(flags + more)
            if text not in fits:
                fits[text] = shape(fixed, slices, (), allow_fragment=False,
                                   advise=False).reject is None
            if not fits[text]:
                continue
            if text in seen:
                continue
            seen.add(text)
            ranked.append(((changes_job, len(flags) + len(more), abs(got - total), -got),
                           f"{text} ({got} GPU{'s' if got != 1 else ''})"))
            break
    ranked.sort(key=lambda r: r[0])
    if ranked and ranked[0][0][0] == 0:  # some fix keeps its GPUs and tasks: only those
        ranked = [r for r in ranked if r[0][0] == 0]
    return [text for _key, text in ranked[:3]]


def _tasks(req: JobRequest) -> int | None:
    """The job's task count where it gave one (--ntasks, or --ntasks-per-node with -N);
    None also for one task per node (--ntasks-per-node=1: a launcher per node, such as
    torchrun or accelerate, whose count follows the node count)."""
    if req.ntasks_per_node == 1:
        return None
    if req.num_tasks:
        return req.num_tasks
    if req.ntasks_per_node and req.min_nodes:
        return req.ntasks_per_node * req.min_nodes
    return None


def per_node_gpu_flag(req: JobRequest, count: int) -> str:
    """``count`` GPUs per node in the option the job used for them: --gpus-per-node or
    --gres (``JobRequest.gpu_option``; job_desc cannot tell them apart, and --gres is the
    one to name when it is not known)."""
    gtype = next((g.gpu_type for g in req.gpus if g.per == "node" and g.gpu_type), None)
    kind = f"{gtype}:" if gtype else ""
    if req.gpu_option == "--gpus-per-node":
        return f"--gpus-per-node={kind}{count}"
    return f"--gres=gpu:{kind}{count}"


def _keeping(req: JobRequest, nodes: int, most_nodes: int) -> list[tuple[JobRequest, list[str]]]:
    """The job on another node count with its total GPUs and tasks kept: GPUs per node
    (when it counts them per node) and tasks per node (when it gives them) to match, in
    its own flags. Per-job and per-task GPUs keep their total as they are."""
    out: list[tuple[JobRequest, list[str]]] = []
    scope = _scope(req)
    per_node_items = [g for g in req.gpus if g.per == "node" and g.count > 0]
    if scope == "node" and len(per_node_items) != 1:
        return out  # several GPU types per node: no one count to change
    total = replace(req, min_nodes=nodes).total_gpus() or 0
    tasks = _tasks(req)
    for n in range(1, most_nodes + 1):
        if n == nodes or (tasks is not None and tasks < n):
            continue
        changed, flags = req, []
        if req.min_nodes is not None:
            changed = replace(changed, min_nodes=n, max_nodes=n)
            flags.append(f"--nodes={n}")
        if scope == "node":
            if total % n:
                continue
            gpus = tuple(replace(g, count=total // n) if g.per == "node" else g
                         for g in req.gpus)
            changed = replace(changed, gpus=gpus)
            flags.append(per_node_gpu_flag(req, total // n))
        if req.ntasks_per_node == 1 and req.num_tasks:  # one launcher per node, kept
            changed = replace(changed, num_tasks=n)
            flags.append(f"--ntasks={n}")
        elif req.ntasks_per_node and tasks is not None:
            per = math.ceil(tasks / n)
            if req.min_nodes is None and tasks % n:
                continue  # the node count follows from the tasks per node
            changed = replace(changed, ntasks_per_node=per, num_tasks=tasks)
            flags.append(f"--ntasks-per-node={per}")
        if scope == "task" and tasks is not None and tasks % n:
            continue  # GPUs bound to tasks: the tasks must split evenly
        if (changed.total_gpus() or 0) != total or _tasks(changed) != tasks:
            continue
        out.append((changed, flags))
    return out
