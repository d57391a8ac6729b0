"""The simulated cluster: the config's nodes, and gang-atomic placement on them.

Placement follows admission's shapes (``policy.admission.shape``): a job that fits one node of an
acceptable type goes on one node (best fit: the fullest node that still has room); a
larger one takes whole nodes of one GPU type, ceil(GPUs / GPUs per node) of them, under
one leaf switch when any leaf has enough free nodes (the leaf that keeps most others
whole), else spread over leaves. Free nodes are kept in buckets by free GPU count, so a
placement costs a few dictionary look-ups, not a scan of the cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from slurm_ml.config import Config

#: Where a job runs: (node index, GPUs it holds there), one entry per node.
Alloc = tuple[tuple[int, int], ...]


class Cluster:
    """Nodes (by index, in the config's natural order) and their free GPUs."""

    def __init__(self, cfg: Config) -> None:
        self.type_names: list[str] = list(cfg.gpu_types)
        type_index = {name: i for i, name in enumerate(self.type_names)}
        leaves: dict[str, int] = {}
        self.names: list[str] = []
        self.type_of: list[int] = []
        self.gpn: list[int] = []
        self.leaf: list[int] = []
        for name in cfg.all_nodes():
            node_class = cfg.node_class_of(name)
            if node_class is None or node_class.gpus_per_node <= 0:
                continue
            self.names.append(name)
            self.type_of.append(type_index[node_class.gpu_type])
            self.gpn.append(node_class.gpus_per_node)
            self.leaf.append(leaves.setdefault(node_class.leaf_switch, len(leaves)))
        self.free: list[int] = list(self.gpn)
        self.total = sum(self.gpn)
        self.free_total = self.total
        ntypes = len(self.type_names)
        self.type_total = [0] * ntypes
        for n, t in enumerate(self.type_of):
            self.type_total[t] += self.gpn[n]
        self.free_by_type = list(self.type_total)
        self.version = 0  # bumped by every take and release: what was computed still holds
        self.max_gpn = [max((g for n, g in enumerate(self.gpn) if self.type_of[n] == t),
                            default=0) for t in range(ntypes)]
        self._largest_of: dict[tuple[int, ...], int] = {}  # type set -> its largest node
        # single-node buckets: per type, per free count -> nodes (a dict as an ordered set)
        self._single: list[list[dict[int, None]]] = [
            [{} for _ in range(self.max_gpn[t] + 1)] for t in range(ntypes)]
        # whole-free nodes per (type, GPUs per node) group, per leaf
        self._groups: list[tuple[int, int]] = sorted(
            {(t, g) for t, g in zip(self.type_of, self.gpn, strict=True)},
            key=lambda tg: (tg[0], -tg[1]))
        group_index = {tg: i for i, tg in enumerate(self._groups)}
        self._group_of = [group_index[t, g] for t, g in zip(self.type_of, self.gpn, strict=True)]
        self._group_nodes = [0] * len(self._groups)
        self._whole: list[dict[int, dict[int, None]]] = [{} for _ in self._groups]
        for n in range(len(self.names)):
            self._single[self.type_of[n]][self.gpn[n]][n] = None
            self._whole[self._group_of[n]].setdefault(self.leaf[n], {})[n] = None
            self._group_nodes[self._group_of[n]] += 1

    # ------------------------------------------------------------------ shapes

    def types_for(self, gpu_type: str | None) -> tuple[int, ...]:
        """Type indices a job may run on (all for an untyped job; () for an unknown type)."""
        if gpu_type is None:
            return tuple(range(len(self.type_names)))
        return tuple(i for i, name in enumerate(self.type_names) if name == gpu_type)

    def types_among(self, gpu_types: Sequence[str]) -> tuple[int, ...]:
        """Type indices of the named types (what admission let a job run on)."""
        return tuple(i for i, name in enumerate(self.type_names) if name in gpu_types)

    def one_node(self, gpus: int, types: Sequence[int]) -> bool:
        """Whether the job goes on one node: it fits a node of some acceptable type."""
        return gpus <= self._largest(types)

    def _largest(self, types: Sequence[int]) -> int:
        """GPUs on the largest node of the types (0: none). Asked at every placement,
        reservation and preemption, of a handful of type sets: kept, not recomputed."""
        key = types if isinstance(types, tuple) else tuple(types)
        got = self._largest_of.get(key)
        if got is None:
            got = self._largest_of[key] = max((self.max_gpn[t] for t in key), default=0)
        return got

    def feasible(self, gpus: int, types: Sequence[int]) -> bool:
        """Whether the job could ever run here (on the empty cluster)."""
        if self.one_node(gpus, types):
            return True
        return any(t in types and nodes * gpn >= gpus
                   for (t, gpn), nodes in zip(self._groups, self._group_nodes, strict=True))

    # ------------------------------------------------------------------ placement now

    def place(self, gpus: int, types: Sequence[int],
              exclude: frozenset[int] = frozenset()) -> Alloc | None:
        """Where the job would start now (None: it does not fit), avoiding ``exclude``."""
        if self.one_node(gpus, types):
            single = self._single
            for free in range(gpus, self._largest(types) + 1):
                for t in types:
                    if free < len(single[t]):
                        for n in single[t][free]:
                            if n not in exclude:
                                return ((n, gpus),)
            return None
        spread: tuple[int, int, list[list[int]]] | None = None
        for gi, (t, gpn) in enumerate(self._groups):
            if t not in types:
                continue
            need = math.ceil(gpus / gpn)
            by_leaf = [[n for n in nodes if n not in exclude] if exclude else list(nodes)
                       for nodes in self._whole[gi].values()]
            fits = [ns for ns in by_leaf if len(ns) >= need]
            if fits:  # one leaf: the one with the fewest free whole nodes that suffices
                best = min(fits, key=len)
                return tuple((n, gpn) for n in best[:need])
            if spread is None and sum(len(ns) for ns in by_leaf) >= need:
                spread = (gpn, need, by_leaf)
        if spread is None:
            return None
        gpn, need, by_leaf = spread
        out: list[tuple[int, int]] = []
        for ns in sorted(by_leaf, key=len, reverse=True):  # fewest leaves
            out.extend((n, gpn) for n in ns[:need - len(out)])
            if len(out) == need:
                break
        return tuple(out)

    def whole_free(self, gpu_type: int, gpus_per_node: int) -> int:
        """Entirely free nodes of this GPU type and size (the gangs' candidates)."""
        try:
            gi = self._groups.index((gpu_type, gpus_per_node))
        except ValueError:
            return 0
        return sum(len(nodes) for nodes in self._whole[gi].values())

    def take(self, alloc: Alloc) -> None:
        self.version += 1
        for n, g in alloc:
            self._move(n, self.free[n] - g)

    def release(self, alloc: Alloc) -> None:
        self.version += 1
        for n, g in alloc:
            self._move(n, self.free[n] + g)

    def _move(self, n: int, free: int) -> None:
        old = self.free[n]
        t, gpn = self.type_of[n], self.gpn[n]
        if free < 0 or free > gpn:
            raise ValueError(f"node {self.names[n]}: {free} free GPUs of {gpn}")
        single = self._single[t]
        del single[old][n]
        single[free][n] = None
        if old == gpn:
            del self._whole[self._group_of[n]][self.leaf[n]][n]
        elif free == gpn:
            self._whole[self._group_of[n]][self.leaf[n]][n] = None
        self.free[n] = free
        self.free_total += free - old
        self.free_by_type[t] += free - old

    # ------------------------------------------------------------------ reservations

    def earliest(self, gpus: int, types: Sequence[int],
                 ends: Iterable[tuple[float, Alloc]]) -> tuple[float, frozenset[int]] | None:
        """When and where the job could start if nothing else started: ``ends`` are the
        running jobs' (estimated end, allocation), soonest first. None: never."""
        extra: dict[int, int] = {}
        free, type_of = self.free, self.type_of
        if self.one_node(gpus, types):
            for at, alloc in ends:
                hit = False
                for n, g in alloc:
                    more = extra.get(n, 0) + g
                    extra[n] = more
                    if free[n] + more >= gpus and type_of[n] in types:
                        hit = True
                if hit:
                    return at, self._reserve_one(gpus, types, extra)
            return None
        need = {gi: math.ceil(gpus / gpn) for gi, (t, gpn) in enumerate(self._groups)
                if t in types}
        whole = {gi: sum(len(ns) for ns in self._whole[gi].values()) for gi in need}
        for at, alloc in ends:
            hit = False
            for n, g in alloc:
                more = extra.get(n, 0) + g
                extra[n] = more
                gi = self._group_of[n]
                if gi in need and free[n] + more == self.gpn[n]:
                    whole[gi] += 1
                    hit = hit or whole[gi] >= need[gi]
            if hit:
                return at, self._reserve_many(gpus, types, extra)
        return None

    def _reserve_one(self, gpus: int, types: Sequence[int], extra: dict[int, int],
                     ) -> frozenset[int]:
        """The node :meth:`place` would pick once ``extra`` GPUs are free again: of those
        of an acceptable type with room, the fewest free GPUs, then the lowest index.

        Only the nodes in ``extra`` change; every other node is where the buckets keep
        it, so its best is the lowest index in the first bucket that has room, and a
        reservation costs what the ends walked cost rather than a scan of the cluster."""
        free, type_of = self.free, self.type_of
        best: tuple[int, int] | None = None
        for n, more in extra.items():
            if type_of[n] in types:
                have = free[n] + more
                if have >= gpus and (best is None or (have, n) < best):
                    best = (have, n)
        for t in types:
            single = self._single[t]
            for have in range(gpus, len(single)):
                if best is not None and have > best[0]:
                    break
                nodes = [n for n in single[have] if n not in extra]
                if nodes:
                    if best is None or (have, min(nodes)) < best:
                        best = (have, min(nodes))
                    break
        if best is None:
            raise AssertionError("earliest() found a time but no node")
        return frozenset({best[1]})

    def _reserve_many(self, gpus: int, types: Sequence[int], extra: dict[int, int],
                      ) -> frozenset[int]:
        """The nodes :meth:`place` would pick once ``extra`` GPUs are free again."""
        spread: list[int] | None = None
        for gi, (t, gpn) in enumerate(self._groups):
            if t not in types:
                continue
            need = math.ceil(gpus / gpn)
            by_leaf: dict[int, list[int]] = {}
            for n in range(len(self.names)):
                if self._group_of[n] == gi and self.free[n] + extra.get(n, 0) == gpn:
                    by_leaf.setdefault(self.leaf[n], []).append(n)
            fits = [ns for ns in by_leaf.values() if len(ns) >= need]
            if fits:
                return frozenset(min(fits, key=len)[:need])
            if spread is None and sum(len(ns) for ns in by_leaf.values()) >= need:
                spread = []
                for ns in sorted(by_leaf.values(), key=len, reverse=True):
                    spread.extend(ns[:need - len(spread)])
        if spread is None:
            raise AssertionError("earliest() found a time but no nodes")
        return frozenset(spread)

    # ------------------------------------------------------------------ fragmentation

    def unusable(self, one_node: dict[int, int], gangs: dict[int, int]) -> int:
        """Free GPUs no pending job could use: ``one_node`` maps a type to the fewest GPUs
        a pending one-node job of that type asks; ``gangs`` a (type, GPUs per node) group
        to the fewest whole nodes a pending gang job there needs."""
        usable = 0
        whole = [sum(len(ns) for ns in leaves.values()) for leaves in self._whole]
        for n, free in enumerate(self.free):
            if not free:
                continue
            group = self._group_of[n]
            gang = free == self.gpn[n] and gangs.get(group, 1 << 30) <= whole[group]
            if gang or free >= one_node.get(self.type_of[n], 1 << 30):
                usable += free
        return self.free_total - usable

    def gang_groups(self, gpus: int, types: Sequence[int]) -> list[tuple[int, int]]:
        """(group, whole nodes needed) for a job too big for one node."""
        return [(gi, math.ceil(gpus / gpn)) for gi, (t, gpn) in enumerate(self._groups)
                if t in types]
