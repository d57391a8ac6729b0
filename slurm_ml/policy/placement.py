"""Where a starved job would start, node by node, and which requeues would make the room.

Requeue planning that counts free GPUs over the whole cluster requeues jobs whose GPUs
cannot help: 4 + 3 free GPUs on two nodes do not start an 8-GPU single-node job. So the
plan places the job the way the admission shapes do (``policy.admission.shape``, ``sim.cluster``):
a job that fits one node of a type it accepts goes on one node; a larger one takes
``ceil(GPUs / GPUs per node)`` whole nodes of one type and size under one leaf switch.
Only victims whose GPUs complete such a placement are requeued, and of those the set
that loses the fewest GPU-hours of work (GPUs x how long this run has run: slurm-ml
cannot see checkpoints).

GPUs held by QOS ``free`` jobs count as room: Slurm's preempt/qos requeues them for an
allocated job by itself. A gang "fits now" when enough whole nodes are free over any
leaves, since Slurm spreads it once the ``--switches`` wait ends; requeues, though, only
make room under one leaf. Search: exact (every subset) on one node, greedy by marginal
cost over a leaf's nodes (exact when each victim holds one node).

Pure: the nodes, the running jobs and the clock come in as values.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurm_ml.config import Config
from slurm_ml.model import FREE_QOS, Node
from slurm_ml.policy.cluster_jobs import RunningJob

#: Node states that take no new work (besides a drain and NOT_RESPONDING).
_UNUSABLE = frozenset({"DOWN", "FAIL", "FUTURE", "UNKNOWN"})

#: More candidate victims than this on one node: greedy instead of every subset.
_EXACT_MAX = 10


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A GPU node as placement needs it."""

    name: str
    gpu_type: str
    leaf: str  # leaf switch
    gpus: int  # GPUs it has
    usable: bool = True  # False: drained, down or not responding (takes no new work)


@dataclass(frozen=True, slots=True)
class NodeSlot:
    """A node now: what an allocated job could have of it, and who holds the rest."""

    spec: NodeSpec
    free: int  # idle GPUs plus those QOS free jobs hold (Slurm requeues them itself)
    held: tuple[tuple[int, int], ...] = ()  # (allocated job id, GPUs it holds here)


#: Node name -> its slot.
NodeMap = Mapping[str, NodeSlot]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job would start and what must be requeued first (nothing: it fits now)."""

    gpu_type: str
    nodes: tuple[str, ...]
    victims: tuple[RunningJob, ...]
    lost_gpu_h: float  # work the victims lose: GPUs x this run's run time

    @property
    def gpus(self) -> int:
        return sum(v.gpus for v in self.victims)


def held_per_node(job: RunningJob) -> int:
    """GPUs a job holds on each of its nodes (Slurm reports a job's total)."""
    return job.gpus // len(job.nodes) if job.nodes else 0


def lost_gpu_h(now: int, job: RunningJob) -> float:
    """GPU-hours of work a requeue of ``job`` throws away (its whole run so far)."""
    return job.gpus * job.ran_s(now) / 3600


def node_slots(nodes: Iterable[NodeSpec], running: Iterable[RunningJob]) -> dict[str, NodeSlot]:
    """Each node's slot from the jobs running on it (unknown nodes are ignored)."""
    specs = {n.name: n for n in nodes}
    busy: dict[str, int] = {}
    held: dict[str, list[tuple[int, int]]] = {}
    for r in running:
        per = held_per_node(r)
        if per <= 0:
            continue
        for name in r.nodes:
            if name not in specs:
                continue
            if r.qos == FREE_QOS:
                continue  # room for an allocated job: Slurm preempts it
            busy[name] = busy.get(name, 0) + per
            held.setdefault(name, []).append((r.job_id, per))
    return {name: NodeSlot(spec=s, free=max(0, s.gpus - busy.get(name, 0)),
                           held=tuple(held.get(name, ())))
            for name, s in specs.items()}


def cluster_nodes(cfg: Config, nodes: Iterable[Node]) -> list[NodeSpec]:
    """The GPU nodes slurmctld reports, as placement sees them (the daemon's view)."""
    out = []
    for node in nodes:
        node_class = cfg.node_class_of(node.name)
        if node_class is None or node_class.gpus_per_node <= 0:
            continue
        usable = not (node.drained or node.state in _UNUSABLE or "NOT_RESPONDING" in node.flags)
        out.append(NodeSpec(name=node.name, gpu_type=node_class.gpu_type,
                            leaf=node_class.leaf_switch,
                            gpus=node.gpus_total or node_class.gpus_per_node, usable=usable))
    return out


def _accepts(types: frozenset[str], gpu_type: str) -> bool:
    return not types or gpu_type in types


def one_node(gpus: int, types: frozenset[str], slots: NodeMap) -> bool:
    """Whether the shape is one node: the job fits some node of a type it accepts."""
    return any(gpus <= s.spec.gpus for s in slots.values() if _accepts(types, s.spec.gpu_type))


def fits_now(gpus: int, types: frozenset[str], slots: NodeMap) -> bool:
    """Whether the job could start on the room there is now (a scan: for one question)."""
    if not slots:  # no room anywhere (``is_starved``'s question for every waiting job)
        return False
    return Planner(0, slots, ()).fits(gpus, types)


#: Ranks options: GPU-hours lost, then GPUs requeued, victims, the caller's preference,
#: and node names (stable).
_Key = tuple[float, int, int, float, tuple[str, ...]]


class Planner:
    """Node-level placement over one plan: answers for one job, then ``commit`` updates
    the room so that the next job sees it. ``victims`` are the running jobs that may be
    requeued for someone; the rules for a given job come in as ``can_take``/``set_ok``.
    ``prefer`` breaks ties between equally costly victims (lower first)."""

    def __init__(self, now: int, slots: NodeMap, victims: Iterable[RunningJob],
                 prefer: Callable[[RunningJob], float] | None = None) -> None:
        self.now = now
        self.spec = {n: s.spec for n, s in slots.items()}
        self.free = {n: s.free for n, s in slots.items()}
        self.held: dict[str, dict[int, int]] = {n: dict(s.held) for n, s in slots.items()}
        self.victims = {v.job_id: v for v in victims if v.nodes}
        self.by_account: dict[str, set[int]] = {}
        for j, v in self.victims.items():
            self.by_account.setdefault(v.account, set()).add(j)
        self.cost = {j: lost_gpu_h(now, v) for j, v in self.victims.items()}
        self.pref = {j: 0.0 if prefer is None else prefer(v) for j, v in self.victims.items()}
        self.by_type: dict[str, list[str]] = {}
        self.max_gpn: dict[str, int] = {}
        for n, spec in self.spec.items():
            self.by_type.setdefault(spec.gpu_type, []).append(n)
            self.max_gpn[spec.gpu_type] = max(self.max_gpn.get(spec.gpu_type, 0), spec.gpus)
        self._type_cache: dict[frozenset[str], list[str]] = {}
        self._gang_memo: dict[tuple[int, frozenset[str]], tuple[int, bool]] = {}
        self._room_memo: dict[tuple[int, frozenset[str]], tuple[int, bool, int]] = {}
        self._max_free: dict[str, int] = {}
        self._sorted: dict[tuple[str, int], list[tuple[float, int, str]]] = {}
        self._lb: dict[tuple[str, int], dict[str, tuple[float, int, str]]] = {}
        self.version = 0  # bumped by every commit

    # ------------------------------------------------------------------ shapes and room

    def _types(self, types: frozenset[str]) -> list[str]:
        got = self._type_cache.get(types)
        if got is None:
            got = sorted(t for t in self.by_type if _accepts(types, t))
            self._type_cache[types] = got
        return got

    def one_node(self, gpus: int, types: frozenset[str]) -> bool:
        return any(gpus <= self.max_gpn[t] for t in self._types(types))

    def _groups(self, types: frozenset[str]) -> list[tuple[str, int]]:
        return sorted({(s.gpu_type, s.gpus) for s in self.spec.values()
                       if _accepts(types, s.gpu_type)})

    def _whole(self, n: str) -> bool:
        return self.spec[n].usable and not self.held[n] and self.free[n] >= self.spec[n].gpus

    def fits(self, gpus: int, types: frozenset[str]) -> bool:
        """Whether the job could start now without any requeue."""
        if self.one_node(gpus, types):
            return any(self._max_free_of(t) >= gpus for t in self._types(types))
        return self._gang_fits(gpus, types)

    def free_place(self, gpus: int, types: frozenset[str]) -> Placement | None:
        """A single-node job's place without any requeue: the usable node of an accepted
        type with the fewest free GPUs that still fit it (best fit, as Slurm's select
        packs), ties by name; None for a gang or when none fits."""
        if not self.one_node(gpus, types):
            return None
        fit = [(self.free[n], n) for t in self._types(types) for n in self.by_type[t]
               if self.spec[n].usable and self.free[n] >= gpus]
        if not fit:
            return None
        n = min(fit)[1]
        return Placement(self.spec[n].gpu_type, (n,), (), 0.0)

    def _gang_fits(self, gpus: int, types: frozenset[str]) -> bool:
        key = (gpus, types)
        got = self._gang_memo.get(key)
        if got is not None and got[0] == self.version:
            return got[1]
        fits = self._gang_scan(gpus, types)
        self._gang_memo[key] = (self.version, fits)
        return fits

    def _gang_scan(self, gpus: int, types: frozenset[str]) -> bool:
        for t, gpn in self._groups(types):
            whole = sum(1 for n in self.by_type[t] if self.spec[n].gpus == gpn and self._whole(n))
            if whole >= math.ceil(gpus / gpn):
                return True
        return False

    def least_requeue(self, gpus: int, types: frozenset[str]) -> int:
        """GPUs any placement of a single-node job must requeue at least (gangs: 0)."""
        if not self.one_node(gpus, types):
            return 0
        return max(0, gpus - max((self._max_free_of(t) for t in self._types(types)), default=0))

    def room(self, gpus: int, types: frozenset[str]) -> tuple[bool, int]:
        """(:meth:`fits`, :meth:`least_requeue`) at once, one answer per shape until the
        next commit: many waiting jobs ask the same shape, and the room changes only then."""
        key = (gpus, types)
        got = self._room_memo.get(key)
        if got is None or got[0] != self.version:
            fits = self.fits(gpus, types)
            got = (self.version, fits, 0 if fits else self.least_requeue(gpus, types))
            self._room_memo[key] = got
        return got[1], got[2]

    def _max_free_of(self, t: str) -> int:
        got = self._max_free.get(t)
        if got is None:
            got = max((self.free[n] for n in self.by_type[t] if self.spec[n].usable), default=0)
            self._max_free[t] = got
        return got

    # ------------------------------------------------------------------ single node

    def _cover(self, n: str, need: int, items: list[int], budget: int,
               set_ok: Callable[[Sequence[RunningJob]], bool] | None,
               ) -> tuple[float, int, int, float, tuple[int, ...]] | None:
        """The cheapest victims on ``n`` that free ``need`` GPUs there, within ``budget``
        GPUs requeued: (GPU-hours lost, GPUs requeued, victims, preference, job ids), None
        if none. Branch and bound over the victims cheapest first; greedy past
        ``_EXACT_MAX`` of them."""
        held, cost, victims, pref = self.held[n], self.cost, self.victims, self.pref
        # among equals, the highest job id first (the rule before GPU-hours: youngest)
        items = sorted(items, key=lambda j: (cost[j], pref[j], victims[j].gpus, -j))
        best: list[tuple[float, int, int, float, tuple[int, ...]]] = []

        def offer(combo: tuple[int, ...], spent: float, gpus: int) -> None:
            key = (spent, gpus, len(combo), sum(pref[j] for j in combo))
            if gpus > budget or (best and key >= best[0][:4]):
                return
            if set_ok is not None and not set_ok([victims[j] for j in combo]):
                return
            best[:] = [(*key, combo)]

        if len(items) > _EXACT_MAX:
            chosen: list[int] = []
            freed = 0
            for j in items:
                if freed >= need:
                    break
                chosen.append(j)
                freed += held[j]
            if freed >= need:
                offer(tuple(chosen), sum(cost[j] for j in chosen),
                      sum(victims[j].gpus for j in chosen))
            return best[0] if best else None

        def search(i: int, combo: tuple[int, ...], freed: int, spent: float, gpus: int) -> None:
            for k in range(i, len(items)):
                j = items[k]
                c, g = spent + cost[j], gpus + victims[j].gpus
                if best and c > best[0][0]:
                    return  # cheapest first: every later one costs more still
                if freed + held[j] >= need:
                    offer((*combo, j), c, g)
                else:
                    search(k + 1, (*combo, j), freed + held[j], c, g)

        search(0, (), 0, 0.0, 0)
        return best[0] if best else None

    def _lower(self, n: str, gpus: int) -> tuple[float, int, str] | None:
        """The cheapest any job could get ``gpus`` on ``n`` for (None: not even then)."""
        spec = self.spec[n]
        if not spec.usable or spec.gpus < gpus:
            return None
        need = gpus - self.free[n]
        if need <= 0:
            return (0.0, 0, n)
        items = [j for j in self.held[n] if j in self.victims]
        if sum(self.held[n][j] for j in items) < need:
            return None
        got = self._cover(n, need, items, 1 << 30, None)
        return None if got is None else (got[0], got[1], n)

    def _order(self, t: str, gpus: int) -> list[tuple[float, int, str]]:
        key = (t, gpus)
        got = self._sorted.get(key)
        if got is None:
            lbs = {n: lb for n in self.by_type[t] if (lb := self._lower(n, gpus)) is not None}
            self._lb[key] = lbs
            got = sorted(lbs.values())
            self._sorted[key] = got
        return got

    def nodes_of(self, accounts: Collection[str]) -> set[str] | None:
        """The nodes where victims of ``accounts`` run; None when they run on too many for
        the list to narrow the search."""
        jobs = sum(len(self.by_account.get(a, ())) for a in accounts)
        if jobs * 4 > len(self.spec):
            return None
        return {n for a in accounts for j in self.by_account.get(a, ())
                for n in self.victims[j].nodes}

    def _single(self, gpus: int, types: frozenset[str], *,
                can_take: Callable[[RunningJob], bool],
                set_ok: Callable[[Sequence[RunningJob]], bool], budget: int,
                only: Collection[str] | None) -> tuple[_Key, Placement] | None:
        best: tuple[_Key, Placement] | None = None
        for t in self._types(types):
            order = self._order(t, gpus)
            if only is not None and len(only) < len(order):
                lbs = self._lb[t, gpus]
                order = sorted(lbs[n] for n in only if n in lbs)
            for lb_cost, lb_gpus, n in order:
                if best is not None and (lb_cost, lb_gpus) > best[0][:2]:
                    break
                need = gpus - self.free[n]
                items = [j for j in self.held[n] if j in self.victims
                         and can_take(self.victims[j])]
                got = self._cover(n, need, items, budget, set_ok) if need > 0 else None
                if got is None:
                    continue
                key: _Key = (*got[:4], (n,))
                if best is None or key < best[0]:
                    best = (key, Placement(t, (n,), tuple(self.victims[j] for j in got[4]),
                                           got[0]))
        return best

    # ------------------------------------------------------------------ gangs

    def _gang(self, gpus: int, types: frozenset[str], can_take: Callable[[RunningJob], bool],
              set_ok: Callable[[Sequence[RunningJob]], bool], budget: int,
              ) -> tuple[_Key, Placement] | None:
        best: tuple[_Key, Placement] | None = None
        for t, gpn in self._groups(types):
            need = math.ceil(gpus / gpn)
            leaves: dict[str, list[str]] = {}
            for n in self.by_type[t]:
                if self.spec[n].gpus == gpn and self.spec[n].usable:
                    leaves.setdefault(self.spec[n].leaf, []).append(n)
            for leaf in sorted(leaves):
                got = self._leaf(leaves[leaf], need, can_take, budget)
                if got is None:
                    continue
                nodes, ids = got
                victims = tuple(self.victims[j] for j in sorted(ids))
                if not set_ok(victims):
                    continue
                cost = sum(self.cost[j] for j in ids)
                key: _Key = (cost, sum(v.gpus for v in victims), len(victims),
                             sum(self.pref[v.job_id] for v in victims), tuple(nodes))
                if best is None or key < best[0]:
                    best = (key, Placement(t, tuple(nodes), victims, cost))
        return best

    def _leaf(self, nodes: list[str], need: int, can_take: Callable[[RunningJob], bool],
              budget: int) -> tuple[list[str], set[int]] | None:
        """``need`` whole nodes of one leaf, greedily by the work their clearing loses."""
        whole = sorted(n for n in nodes if not self.held[n])
        if len(whole) >= need:
            return None  # fits now: nothing to requeue
        clearable = {n: set(self.held[n]) for n in nodes if self.held[n]
                     and all(j in self.victims and can_take(self.victims[j])
                             for j in self.held[n])}
        if len(whole) + len(clearable) < need:
            return None
        picked, ids = list(whole), set[int]()
        while len(picked) < need:
            n = min(clearable, key=lambda m: (sum(self.cost[j] for j in clearable[m] - ids),
                                              m))
            ids |= clearable.pop(n)
            picked.append(n)
        if sum(self.victims[j].gpus for j in ids) > budget:
            return None
        return sorted(picked), ids

    # ------------------------------------------------------------------ the plan

    def best(self, gpus: int, types: frozenset[str], *, can_take: Callable[[RunningJob], bool],
             set_ok: Callable[[Sequence[RunningJob]], bool], budget: int,
             only: Collection[str] | None = None) -> Placement | None:
        """The placement whose victims lose the fewest GPU-hours (then requeue the fewest
        GPUs and jobs), all allowed by ``can_take`` and together by ``set_ok``, and within
        ``budget`` GPUs; None when no requeue within the rules makes room. ``only``: the
        nodes worth a look for a single-node job (those ``can_take`` victims run on)."""
        if gpus <= 0:
            return None
        if self.one_node(gpus, types):
            got = self._single(gpus, types, can_take=can_take, set_ok=set_ok, budget=budget,
                               only=only)
        else:
            got = self._gang(gpus, types, can_take, set_ok, budget)
        return None if got is None else got[1]

    def commit(self, placement: Placement, gpus: int) -> None:
        """The victims leave and the job takes its place: later jobs see the room left."""
        touched: set[str] = set()
        for v in placement.victims:
            self.victims.pop(v.job_id, None)
            self.by_account.get(v.account, set()).discard(v.job_id)
            for n in v.nodes:
                got = self.held.get(n, {}).pop(v.job_id, None)
                if got is not None:
                    self.free[n] = min(self.spec[n].gpus, self.free[n] + got)
                    touched.add(n)
        per = gpus if len(placement.nodes) == 1 else None
        self.version += 1
        for n in placement.nodes:
            take = per if per is not None else self.spec[n].gpus
            self.free[n] = max(0, self.free[n] - take)
            self.held[n][-self.version] = take  # the job itself: no victim, never whole
            touched.add(n)
        for n in touched:
            t = self.spec[n].gpu_type
            self._max_free.pop(t, None)
            for key in [k for k in self._sorted if k[0] == t]:
                order, lbs = self._sorted[key], self._lb[key]
                old = lbs.pop(n, None)
                if old is not None:
                    del order[bisect_left(order, old)]
                new = self._lower(n, key[1])
                if new is not None:
                    lbs[n] = new
                    insort(order, new)
